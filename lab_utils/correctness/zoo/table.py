"""Bisect every bug of the zoo, buggy and fixed, and print the verdicts (lab 14)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from lab_utils.correctness.bisector import BisectReport, bisect
from lab_utils.correctness.zoo.registry import BUGS, Bug


@dataclass
class ZooRow:
    bug: str
    source: str
    named: str  # what the bisector named for the buggy version ("-" when nothing)
    expected: str
    fixed: str  # the fixed version's verdict
    ok: bool  # found at its op AND the fixed version is clean
    detail: str  # the bisector's one-line explanation
    fixed_margin: float  # the fixed version's worst error / bound (< 1: within the bound)

    @property
    def verdict(self) -> str:
        if self.ok:
            return "found"
        return "MISSED" if self.named != self.expected else "FIXED NOT CLEAN"


def _row(bug: Bug, buggy: BisectReport, fixed: BisectReport) -> ZooRow:
    named = buggy.op or "-"
    detail = str(buggy.divergence) if buggy.divergence else "; ".join(buggy.collective_flags)
    ok = named == bug.expected_op and fixed.verdict == "clean"
    return ZooRow(
        bug.name, bug.source, named, bug.expected_op, fixed.verdict, ok, detail, fixed.worst_ratio
    )


def run_zoo(bugs: Sequence[Bug] = BUGS, timeout_s: float = 180.0) -> list[ZooRow]:
    """Bisect every bug's buggy and fixed version (one launch per world size)."""
    reports = bisect([c for b in bugs for c in (b.buggy, b.fixed)], timeout_s=timeout_s)
    return [_row(b, reports[2 * i], reports[2 * i + 1]) for i, b in enumerate(bugs)]


def format_table(rows: Sequence[ZooRow]) -> str:
    head = ("bug", "source", "op named", "expected op", "fixed", "verdict")
    cells = [head] + [(r.bug, r.source, r.named, r.expected, r.fixed, r.verdict) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(head))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(names: Sequence[str] = (), details: bool = False) -> int:
    """The `python -m lab_utils zoo` command: 0 only if every bug is found and every fix clean."""
    known = {b.name: b for b in BUGS}
    unknown = [n for n in names if n not in known]
    if unknown:
        print(
            f"error: no bug named {unknown[0]!r}; the zoo has: {', '.join(known)}", file=sys.stderr
        )
        return 2
    rows = run_zoo([known[n] for n in names] if names else BUGS)
    print(format_table(rows))
    if details:
        for r in rows:
            print(f"\n{r.bug}: {r.detail}\n  fixed: worst error / bound {r.fixed_margin:.3g}")
    found = sum(r.ok for r in rows)
    print(f"\n{found} of {len(rows)} bugs found at their op with a clean fix")
    return 0 if found == len(rows) else 1
