"""A convention check: no prediction is answered before it is asked (nbtools.problems uses it).

The rule. A ``predict(...)`` is GIVEN AWAY when a formula that its reveal states (a formula-like
fragment of the ``why=`` text of ``<variable>.reveal(...)``) already appears in the cells of the
same section (from the last markdown heading up to the predict call). A formula is a fragment with
a parenthesised group, an arithmetic operator and at least 8 characters once normalised, e.g.
``(p-1)(t_f + t_b)/v`` (multiple-choice reveals are skipped: see ``_why_texts``); the comparison
ignores spaces, backticks and the multiplication signs (``*``, ``·``, ``×``), so the markdown
`` `(p-1)(t_f + t_b)/v` `` and the reveal's ``idle (p-1)(t_f + t_b)/v`` match. The fix is to ask
first and derive after the commit (the reveal, or a cell after it, states the formula).
"""

from __future__ import annotations

import ast
import re

_FRAGMENT = re.compile(r"[\w().+\-*/^·×√ ]+")
_OPERATOR = re.compile(r"[+\-*/^·×√]")
_IGNORED = str.maketrans("", "", " `*·×\n")


def _normal(text: str) -> str:
    return text.translate(_IGNORED)


def formulas(text: str) -> list[str]:
    """The formula-like fragments of ``text``, normalised (see the module's docstring)."""
    found = []
    for run in _FRAGMENT.findall(text):
        start = run.find(
            "("
        )  # drop the words before the first group: "idle (p-1)..." -> "(p-1)..."
        if start < 0:
            continue
        head = run[:start].split(" ")[-1]  # keep a symbol glued to the group, e.g. "sbh(10 + ...)"
        tail = re.split(r" [A-Za-z]{3,}\b", run[start:])[0]  # stop at the next word: "... rounds"
        frag = _normal(head + tail).rstrip(".")
        if len(frag) >= 8 and _OPERATOR.search(frag) and re.search(r"[A-Za-z]", frag):
            found.append(frag)
    return found


def _calls(source: str) -> list[ast.Call]:
    try:
        tree = ast.parse(source)
    except SyntaxError:  # magics (%%ranks) and the like: nothing to check in that cell
        return []
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _why_texts(cells: list, var: str) -> list[str]:
    """The constant parts of the why= argument of every ``var.reveal(...)`` in ``cells``. A
    multiple-choice reveal (``answer=``) is skipped: its why contrasts the answer with the
    formula a learner might wrongly apply, which the section may well state."""
    texts = []
    for cell in cells:
        if cell.cell_type != "code" or f"{var}.reveal" not in cell.source:
            continue
        for call in _calls(cell.source):
            f = call.func
            if (
                isinstance(f, ast.Attribute)
                and f.attr == "reveal"
                and isinstance(f.value, ast.Name)
                and f.value.id == var
                and not any(kw.arg == "answer" for kw in call.keywords)
            ):
                for kw in call.keywords:
                    if kw.arg == "why":
                        texts += [
                            n.value
                            for n in ast.walk(kw.value)
                            if isinstance(n, ast.Constant) and isinstance(n.value, str)
                        ]
    return texts


def _predictions(source: str) -> list[tuple[str, str]]:
    """(variable, key) of every ``variable = predict("key", ...)`` in a cell."""
    out = []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return out
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "predict"
            and node.value.args
            and isinstance(node.value.args[0], ast.Constant)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            out.append((node.targets[0].id, node.value.args[0].value))
    return out


def given_away(nb) -> list[str]:
    """One message per prediction whose reveal's formula appears earlier in its section."""
    found = []
    section_start = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and re.match(r"#{1,3} ", cell.source.lstrip()):
            section_start = i
        if cell.cell_type != "code" or "predict(" not in cell.source:
            continue
        before = _normal("\n".join(c.source for c in nb.cells[section_start:i]))
        for var, key in _predictions(cell.source):
            for frag in {f for why in _why_texts(nb.cells[i:], var) for f in formulas(why)}:
                if frag in before:
                    found.append(
                        f"prediction {key!r} (cell {i}) is answered before it is asked: "
                        f"its reveal's formula {frag} already appears in cells "
                        f"{section_start}-{i - 1}; ask first, derive after the commit"
                    )
    return found
