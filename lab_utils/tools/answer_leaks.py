"""No answer before the commit, read from an EXECUTED notebook (``nbaudit`` runs it).

Under Run All nobody has committed a guess, so every reveal is still hidden; what it holds back
travels in its output's metadata (``predict_view.REVEAL_META``: the prediction's key and the
formula / measured numbers). The answer is SHOWN when, in the prediction's neighbourhood, the
same number is printed anyway:

* before the ask: a markdown cell or a code cell's output between the section's heading and the
  ``predict("<key>", ...)`` cell, or that cell's own output;
* after the ask: an output of any cell up to the reveal and of the cell right after it (a table
  printed beside a hidden reveal). ``reveal(..., show=Table(...))``, or the prediction's
``after_commit(Table(...))`` in a later cell, holds such a table back.

A number counts when it is distinctive: not a whole number below 1000 (a world size, a layer
count) and with at least three significant digits as printed (a two-digit number is too common
to tell); it matches at the precision it is printed with (0.625 matches 0.6254), and "62.5%"
matches 0.625.
"""

from __future__ import annotations

import math
import re
from typing import Any

from lab_utils.exercises.predict_view import REVEAL_META
from lab_utils.tools.nbtools import outputs_text

NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?(%?)")


def distinctive(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return not (float(value).is_integer() and abs(value) < 1000) and value != 0


def _printed(match: re.Match) -> tuple[float, float] | None:
    """(value, half of its last printed digit) of a number in text; None if it has fewer than
    three significant digits."""
    text = match.group(0).rstrip("%").replace(",", "")
    mantissa = re.split(r"[eE]", text)[0].lstrip("-")
    digits = mantissa.replace(".", "").lstrip("0")
    if len(digits) < 3:
        return None
    exponent = int(re.split(r"[eE]", text)[1]) if re.search(r"[eE]", text) else 0
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    value, half = float(text), 0.5 * 10.0 ** (exponent - decimals)
    if match.group(1):
        value, half = value / 100, half / 100
    return value, half


def states(text: str, value: float) -> str:
    """The first number in ``text`` that states ``value`` at its printed precision, or ''."""
    for m in NUMBER.finditer(text):
        printed = _printed(m)
        if printed and abs(printed[0] - value) <= printed[1] * (1 + 1e-9):
            return m.group(0)
    return ""


def _reveals(nb: Any) -> list[tuple[int, str, list[float]]]:
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get(REVEAL_META)
            if meta:
                found.append((i, meta["key"], [v for v in meta["values"] if distinctive(v)]))
    return found


def _texts(cell: Any) -> list[str]:
    """What a learner reads from a cell, reveals excluded (they hide until the commit)."""
    if cell.cell_type == "markdown":
        return [cell.source]
    return [
        outputs_text(o)
        for o in cell.get("outputs", [])
        if not o.get("metadata", {}).get(REVEAL_META)
    ]


def answer_shown(nb: Any) -> list[str]:
    """One message per prediction whose held-back number an output near it states."""
    found = []
    for reveal_at, key, values in _reveals(nb):
        asked = next(
            (
                i
                for i, c in enumerate(nb.cells)
                if c.cell_type == "code"
                and re.search(rf"predict\(\s*['\"]{re.escape(key)}['\"]", c.source)
            ),
            None,
        )
        if asked is None or not values:
            continue
        start = max(
            (
                i
                for i, c in enumerate(nb.cells[:asked])
                if c.cell_type == "markdown" and re.match(r"#{1,3} ", c.source.lstrip())
            ),
            default=0,
        )
        for i in range(start, min(reveal_at + 2, len(nb.cells))):
            if i > asked and nb.cells[i].cell_type == "markdown":
                continue  # prose after the ask is read after the commit, in order
            for text in _texts(nb.cells[i]):
                for v in values:
                    if said := states(text, v):
                        when = "before it is asked" if i < asked else "before the commit"
                        found.append(
                            f"cell {i}: prints {said}, the answer prediction {key!r} "
                            f"(cell {asked}) holds back: shown {when} (hold it back "
                            "with reveal(..., show=...), or ask first)"
                        )
    return found
