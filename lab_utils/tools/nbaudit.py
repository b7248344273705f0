"""What a learner would meet in an EXECUTED lab that no assertion of the lab itself catches.

    python -m lab_utils.tools.nbaudit build/executed/full/*.ipynb    # exit 1 on any finding

``audit(nb)`` reads a notebook as Run All left it (tests/test_notebooks.py runs it on every lab
executed in full mode) and names, cell by cell:

* a traceback inside a grader's message: a ``[NOT YET]`` / ``[PASSED]`` verdict followed by a
  Python traceback or a file path (a grader says what is wrong in a sentence; a demonstration
  of a failure that prints a RankFailure is not a grader and may show its traceback);
* a duplicated output: the same rich output twice in one cell (a reveal or a table shown by the
  helper AND by the cell's value);
* a stale "not committed yet" box: a prediction shown a second time as an old copy;
* a figure whose axis runs far beyond its data (``viz.axis_check``);
* LaTeX eating text: a markdown cell or an HTML output where two "$" signs enclose prose (a
  price "$3 per GPU-hour ... in $M"), which JupyterLab typesets as math;
* an answer shown before its commit (``answer_shown``): under Run All nobody has committed, yet
  an output near a prediction prints the value its reveal holds back.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import nbformat

from lab_utils.exercises.predict_view import NOT_COMMITTED
from lab_utils.tools.answer_leaks import answer_shown
from lab_utils.tools.nbtools import join_text, outputs_text
from lab_utils.viz.axis_check import axis_problems

VERDICT = re.compile(r"^\[(?:NOT YET|PASSED)\]", re.M)
TRACE = re.compile(r"Traceback \(most recent call last\)|File \"/")
PLOTLY = "application/vnd.plotly.v1+json"
# two unescaped "$" on one paragraph, not inside `code`
MATH = re.compile(r"(?<![\\$])\$(?!\$)([^$\n]+?)(?<!\\)\$")
PROSE = re.compile(
    r"(?<![\\{A-Za-z])[A-Za-z]{2,}[ ,.]+[A-Za-z]{2,}\b"  # two words of prose
    r"|^\d[\d.,]*\s*(?:/\s*[A-Za-z]{2,}|[A-Za-z]{2,})"
)  # a price: $3 per, $2.5/GPU


def grader_tracebacks(cell: Any) -> list[str]:
    found = []
    for out in cell.get("outputs", []):
        text = outputs_text(out)
        starts = [m.start() for m in VERDICT.finditer(text)]
        for a, b in zip(starts, starts[1:] + [len(text)]):
            if TRACE.search(text[a:b]):
                found.append(
                    f"a traceback or file path inside a grader's message: "
                    f"{text[a:b].splitlines()[0][:80]!r}"
                )
    return found


def duplicated(cell: Any) -> list[str]:
    seen: set[str] = set()
    found = []
    for out in cell.get("outputs", []):
        if out.get("output_type") not in ("display_data", "execute_result"):
            continue
        # two reveals of different predictions may read alike: their metadata tells them apart
        key = repr(sorted(out.get("data", {}).items())) + repr(out.get("metadata", {}))
        if key in seen and len(key) > 60:
            found.append(f"the same output twice: {outputs_text(out).strip()[:80]!r}")
        seen.add(key)
    return found


def stale_boxes(cell: Any) -> list[str]:
    return [
        f"a stale {NOT_COMMITTED!r} prediction box"
        for out in cell.get("outputs", [])
        if NOT_COMMITTED in join_text(out.get("data", {}).get("text/html", ""))
    ]


def far_axes(cell: Any) -> list[str]:
    return [
        f"a figure's axis runs far beyond its data: {p}"
        for out in cell.get("outputs", [])
        if PLOTLY in out.get("data", {})
        for p in axis_problems(out["data"][PLOTLY])
    ]


def prose_in_math(text: str) -> list[str]:
    """The stretches of ``text`` between two "$" that hold prose: LaTeX would eat them."""
    text = re.sub(r"```.*?```|`[^`\n]*`", " ", text, flags=re.S)  # code is never typeset
    text = re.sub(r"\\(?:text|mathrm|operatorname|textrm|mbox)\{[^}]*\}", " ", text)
    return [m.group(0)[:60] for m in MATH.finditer(text) if PROSE.search(m.group(1))]


def eaten_by_latex(cell: Any) -> list[str]:
    texts = (
        [cell.source]
        if cell.cell_type == "markdown"
        else [outputs_text(o) for o in cell.get("outputs", []) if "text/html" in o.get("data", {})]
    )
    return [
        f"LaTeX would typeset the text {s!r} (two '$' signs: write USD, or \\$)"
        for t in texts
        for s in prose_in_math(t)
    ]


CELL_CHECKS = (grader_tracebacks, duplicated, stale_boxes, far_axes, eaten_by_latex)


def audit(nb: Any) -> list[str]:
    """Every finding of the checks above, as 'cell N: ...' (N as in the lab's own file: the cell
    papermill injects with the parameters is left out)."""
    nb = nbformat.from_dict(
        dict(
            nb,
            cells=[
                c
                for c in nb.cells
                if "injected-parameters" not in c.get("metadata", {}).get("tags", [])
            ],
        )
    )
    found = [
        f"cell {i}: {problem}"
        for i, cell in enumerate(nb.cells)
        for check in CELL_CHECKS
        for problem in check(cell)
    ]
    return found + answer_shown(nb)


def main(paths: list[str]) -> int:
    status = 0
    for path in paths:
        for problem in audit(nbformat.read(path, as_version=4)):
            status = 1
            print(f"{Path(path).name}: {problem}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
