"""Shared by bench_ci.py and soak.py: which tests launch ranks, and reading JUnit XML reports."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A test file that starts ranks: lab_utils.run / ranks / check (exercises), mp.spawn, torchrun.
_LAUNCHES = re.compile(
    r"\brun\(|\branks\(|\bcheck\(|mp\.spawn|get_context\(.spawn.\)|torchrun|torch\.distributed\.run|rank_checks"
)


def test_files() -> tuple[list[str], list[str]]:
    """(unit test files, multi-rank test files), relative to the repository root."""
    unit, multi = [], []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        if path.name in ("test_notebooks.py", "test_browser.py"):
            continue
        (multi if _LAUNCHES.search(path.read_text()) else unit).append(str(path.relative_to(ROOT)))
    return unit, multi


@dataclass
class Case:
    id: str
    seconds: float
    failed: bool
    message: str


def read_junit(path: Path) -> list[Case]:
    cases = []
    for tc in ET.parse(path).iter("testcase"):
        name = tc.get("name", "")
        classname = tc.get("classname", "")
        problem = tc.find("failure")
        if problem is None:
            problem = tc.find("error")
        message = ""
        if problem is not None:
            text = (problem.get("message") or problem.text or "").strip()
            message = next((line for line in text.splitlines() if line.strip()), "")[:160]
        cases.append(
            Case(f"{classname}::{name}", float(tc.get("time", 0)), problem is not None, message)
        )
    return cases
