"""Every lab notebook: follows the conventions, and runs top to bottom in quick mode.

nbval (`--nbval-lax`, collected from labs/ by the test command) executes each notebook too;
this file adds the papermill run with QUICK=True, writing the executed copy to
build/executed/ (the static site is built from those copies).
"""
import json
import time
from pathlib import Path

import nbformat
import pytest

from lab_utils.tools.nbtools import execute_quick, problems

ROOT = Path(__file__).resolve().parents[1]
LABS = sorted((ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))
EXECUTED = ROOT / "build" / "executed"
TIMINGS = EXECUTED / "timings.json"  # read by benchmarks/bench_labs.py; speed is not asserted here


def test_labs_exist_in_order():
    numbers = [p.name[:2] for p in LABS]
    assert numbers and numbers[0] == "00", "lab 00 must exist"
    assert numbers == sorted(set(numbers)), f"duplicate or unordered lab numbers: {numbers}"


@pytest.mark.parametrize("path", LABS, ids=[p.stem for p in LABS])
def test_conventions(path):
    assert problems(nbformat.read(path, as_version=4)) == []


@pytest.mark.parametrize("path", LABS, ids=[p.stem for p in LABS])
def test_quick_mode_runs(path):
    EXECUTED.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    execute_quick(path, EXECUTED / path.name)
    timings = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
    timings[path.stem] = round(time.perf_counter() - start, 1)
    TIMINGS.write_text(json.dumps(timings, indent=1, sort_keys=True))
