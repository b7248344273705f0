"""Every lab notebook: follows the conventions, and runs top to bottom twice.

* QUICK mode (CI's shortcut) under nbval (`--nbval-lax`; cells marked `# NBVAL_CHECK_OUTPUT` must
  reproduce their saved output), in a pytest of its own per notebook (tests/nbval_quick.py), so the
  test run's workers (pytest-xdist) can take different notebooks at once;
* FULL mode with papermill, exactly what a learner's Run All in JupyterLab does; the executed
  copy goes to build/executed/full/, and the audit (lab_utils.tools.nbaudit) reads it: no
  traceback in a grader's message, no output twice, no stale prediction box, no axis far beyond
  its data, no prose typeset as LaTeX, no answer shown before its commit.
Both must pass.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from lab_utils.tools.nbaudit import audit
from lab_utils.tools.nbtools import KERNELSPEC, execute, problems, strip

ROOT = Path(__file__).resolve().parents[1]
LABS = sorted((ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))
EXECUTED = ROOT / "build" / "executed" / "full"
TIMINGS = (
    EXECUTED / "timings"
)  # one file per lab (parallel workers), read by benchmarks/bench_ci.py


def test_labs_exist_in_order():
    numbers = [p.name[:2] for p in LABS]
    assert numbers and numbers[0] == "00", "lab 00 must exist"
    assert numbers == sorted(set(numbers)), f"duplicate or unordered lab numbers: {numbers}"


@pytest.mark.parametrize("path", LABS, ids=[p.stem for p in LABS])
def test_conventions(path):
    assert problems(nbformat.read(path, as_version=4)) == []


def test_notebooks_name_the_kernel_make_lab_installs():
    """JupyterLab rewrites a notebook's kernelspec to the kernel it starts, and the tab then shows
    "modified" before anything ran: every lab names the kernel the Makefile installs."""
    import re

    install = re.search(
        r"ipykernel install .*--name (\S+) --display-name \"([^\"]+)\"",
        (ROOT / "Makefile").read_text(),
    )
    assert install, "the Makefile no longer installs a named kernel: update nbtools.KERNELSPEC"
    assert (KERNELSPEC["name"], KERNELSPEC["display_name"]) == install.groups()
    for path in LABS:
        assert nbformat.read(path, as_version=4).metadata.kernelspec == KERNELSPEC, path.name
    other = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}}
    )
    assert any("kernelspec" in p for p in problems(other))
    assert strip(other) and other.metadata.kernelspec == KERNELSPEC  # `make strip` repairs it


@pytest.mark.parametrize("path", LABS, ids=[p.stem for p in LABS])
def test_quick_mode_runs_under_nbval(path, die_with_pytest):
    cmd = [sys.executable, str(ROOT / "tests" / "nbval_quick.py"), str(path.relative_to(ROOT))]
    res = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        env=dict(os.environ, LAB_QUICK="1"),
        preexec_fn=die_with_pytest,
    )
    out = (
        res.stdout
        if len(res.stdout) <= 12000
        else f"{res.stdout[:8000]}\n[...]\n{res.stdout[-4000:]}"
    )
    # the head holds the FIRST failing cell (the cause); later cells often fail only because of it
    assert res.returncode == 0, (
        f"nbval failed on {path.name} (quick mode):\n{out}{res.stderr[-2000:]}"
    )


# Answers a Run All shows before their commit (issue 36 item 2), as (cell, prediction) pairs per
# lab: empty, every lab holds its answers back (reveal(..., show=...) or guess.after_commit(...)).
# A known leak may be listed here while its cell is fixed; a fixed cell fails the test until its
# entry goes, so the list cannot go stale.
ANSWER_SHOWN: dict[str, set[tuple[int, str]]] = {}
SHOWN = re.compile(r"cell (\d+): prints .*?the answer prediction '([\w.]+)'")


@pytest.mark.parametrize("path", LABS, ids=[p.stem for p in LABS])
def test_full_mode_runs(path):
    TIMINGS.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    execute(path, EXECUTED / path.name, quick=False)
    (TIMINGS / f"{path.stem}.json").write_text(
        json.dumps({"seconds": round(time.perf_counter() - start, 1)})
    )
    found = audit(nbformat.read(EXECUTED / path.name, as_version=4))
    shown = {(int(m.group(1)), m.group(2)) for m in map(SHOWN.match, found) if m}
    others = [f for f in found if not SHOWN.match(f)]
    assert others == [], f"{path.name} as Run All leaves it:\n" + "\n".join(others)
    leaks = "\n".join(f for f in found if SHOWN.match(f))
    assert shown == ANSWER_SHOWN.get(path.stem, set()), (
        f"{path.name}: answers shown before the commit:\n{leaks}"
    )
