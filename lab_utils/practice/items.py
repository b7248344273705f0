"""What every practice item shares: an id shown with its prompt, the submit marker, its secrets.

An ITEM is one thing the learner answers: a drill (a number), a concept question (free text,
self-graded against key points), a critique (find the wrong statements, give the right
numbers) or a debugging walk-through. Its answer is rendered in exactly one way: in the
result of a submission, which starts with ``submitted [<id>]``. Nothing else prints it.

``secrets()`` lists what would give the answer away (the numbers and sentences of the
answer); ``lab_utils.practice.leaks`` searches an executed notebook for them and checks that
each one appears only after the item's submit marker. The prompt (``tag`` + question) is
safe to show.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Protocol

SUBMITTED = "submitted"
ID_PATTERN = r"(?:drill|concept|debug|critique):[A-Za-z0-9_.\-:]+"


def tag(item_id: str) -> str:
    """How an item names itself next to its prompt: ``[drill:amdahl:0.4]``."""
    return f"[{item_id}]"


def submitted_mark(item_id: str) -> str:
    """The first words of every rendered answer; nothing may reveal an answer before it."""
    return f"{SUBMITTED} {tag(item_id)}"


@dataclass(frozen=True)
class Secrets:
    """What gives an item's answer away: numbers (at any printed precision) and sentences."""

    numbers: tuple[float, ...] = ()
    texts: tuple[str, ...] = ()
    units: tuple[str, ...] = ()  # the unit of each number (what may follow it when printed)


class Item(Protocol):
    """The common face of drills, concepts and critiques (``practice.lookup`` finds one)."""

    id: str
    kind: str

    @property
    def prompt(self) -> str: ...

    def secrets(self) -> Secrets: ...


def fmt(x: float) -> str:
    """4 significant digits below 1000, whole numbers with thousands separators above."""
    return f"{x:.4g}" if abs(x) < 1000 else f"{x:,.0f}"


def shorten(text: str, width: int = 90) -> str:
    """``text`` cut at a word boundary to at most ``width`` characters, "…" marking the cut."""
    if len(text) <= width:
        return text
    return text[: width - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"


def with_unit(x: float, unit: str) -> str:
    """A value and its unit as people write them: 42x, 16.4%, 1.57 million USD, 48 GB."""
    if unit in ("x", "%", ""):
        return f"{fmt(x)}{unit}"
    return f"{fmt(x)} {unit}"


# Money is written "USD", never with "$": JupyterLab typesets the text between two "$" signs of
# an HTML output as LaTeX (a price and its unit vanish into math italics). A learner may still
# type "$1.5M": the sign is read and dropped.
MILLION_USD = "million USD"
UNIT_WORDS = {
    "x": ("x", "×", "times"),
    "%": ("%", "percent"),
    MILLION_USD: ("million USD", "million", "M USD", "MUSD", "M"),
}
# Units that are a multiple of a plain count, the factor, and from which size on a number cannot
# be meant in that unit (a 8.8e9 typed for "B params" is the full count): such input is refused
# with a hint, not graded wrong.
SCALED_UNITS = {
    "B params": (1e9, 1e6, "billions of parameters"),
    "GB": (1e9, 1e6, "gigabytes"),
    "MB": (1e6, 1e7, "megabytes"),
    MILLION_USD: (1e6, 1e5, "millions of US dollars"),
}
MATH_PAIR = re.compile(r"(?<!\\)\$[^$]*(?<!\\)\$")


def math_pair(text: str) -> str:
    """The first stretch of ``text`` a notebook would typeset as LaTeX (two unescaped "$"
    signs), or ''. Rendered practice and card text must have none (tests check it)."""
    m = MATH_PAIR.search(text)
    return m.group(0) if m else ""


def parse_answer(value: Any, unit: str = "") -> float:
    """A learner's answer -> float, or ValueError saying what to type.

    Accepts numbers and text such as '544', '1,200', '1e9', '48.5 GB' (the drill's own unit may
    follow the number), '42x', '16%'. Refuses empty text, other units, NaN and infinities.
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(
            f"{value!r} is not a number: type digits, e.g. 48 or 2.5e3"
            + (f" (in {unit})" if unit else "")
        )
    if isinstance(value, (int, float)):
        x = float(value)
    else:
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a number: type digits, e.g. 48 or 2.5e3")
        text = value.strip().replace(",", "").replace("_", "")
        if not text:
            raise ValueError(
                "the answer box is empty: type a number" + (f" (in {unit})" if unit else "")
            )
        if unit == MILLION_USD:
            text = text.removeprefix("$").removeprefix("USD").strip()
        for word in sorted(UNIT_WORDS.get(unit, (unit,)) if unit else (), key=len, reverse=True):
            if word and text.lower().endswith(word.lower()):
                text = text[: -len(word)].strip()
                break
        if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
            raise ValueError(
                f"{value.strip()!r} is not a number"
                + (f" in {unit}" if unit else "")
                + ": type digits only, e.g. 48.5 or 1.2e3"
            )
        x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"{value!r} is not a finite number")
    scale, implausible, words = SCALED_UNITS.get(unit, (1.0, math.inf, ""))
    if abs(x) >= implausible:
        raise ValueError(
            f"{value!r} looks like a plain count, but the answer is in {unit} "
            f"({words}): divide by 1e{round(math.log10(scale))} and submit again"
        )
    return x


def within(x: float, target: float, tolerance: float) -> bool:
    """|x - target| <= tolerance * |target| (relative); an exact match when target is 0."""
    return abs(x - target) <= tolerance * abs(target) if target else x == 0
