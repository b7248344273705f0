"""Where the test command's time goes (issue 12): venv, unit tests, multi-rank tests, each notebook.

    .venv/bin/python benchmarks/bench_ci.py [--jobs 4] [--no-venv]

1. venv: a fresh virtual environment in a temporary folder, built exactly as `make` builds `.venv`
   (pip's cache warm, as on a machine that ran it before).
2. The test command itself (`make test`'s pytest line, `--junitxml`), wall-clock time, then the time
   its test cases took, summed per group: unit tests, multi-rank tests, the browser test, and per
   notebook its nbval run (quick) and its papermill run (full). With several workers the groups
   overlap, so the sums exceed the wall time; the wall time is what CI waits for.
Target: venv + test command <= 10 minutes on the 2-core machine.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from testsplit import ROOT, read_junit, test_files


def time_venv() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        py = Path(tmp) / "bin" / "python"
        start = time.perf_counter()
        steps = [["python3", "-m", "venv", tmp],
                 [py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
                 [py, "-m", "pip", "install", "--quiet", "-r", ROOT / "requirements.txt"],
                 [py, "-m", "pip", "install", "--quiet", "--no-deps", "-e", ROOT],
                 [py, "-m", "ipykernel", "install", "--sys-prefix", "--name", "distributed-labs"]]
        for step in steps:
            subprocess.run([str(x) for x in step], check=True, cwd=tmp, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--no-venv", action="store_true", help="skip timing a fresh venv")
    ns = parser.parse_args()
    venv_s = None if ns.no_venv else time_venv()
    report = ROOT / "build" / "bench_ci.xml"
    report.parent.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(ns.jobs),
           "--dist", "worksteal", "tests",
           f"--junitxml={report}"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    unit, multi = set(test_files()[0]), set(test_files()[1])
    groups: dict[str, float] = defaultdict(float)
    failed = 0
    for case in read_junit(report):
        failed += case.failed
        file = case.id.split("::")[0].replace(".", "/") + ".py"
        if "test_quick_mode_runs_under_nbval[" in case.id:
            groups[f"notebook {case.id.split('[')[1].rstrip(']')} quick (nbval)"] += case.seconds
        elif "test_full_mode_runs[" in case.id:
            groups[f"notebook {case.id.split('[')[1].rstrip(']')} full (papermill)"] += case.seconds
        elif file in multi:
            groups["multi-rank tests"] += case.seconds
        elif file in unit:
            groups["unit tests"] += case.seconds
        else:
            groups[f"other: {file}"] += case.seconds
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, {ns.jobs} workers")
    if venv_s is not None:
        print(f"  {'venv (fresh, pip cache warm)':44} {venv_s:7.1f} s")
    for name in sorted(groups, key=lambda n: (n.startswith("notebook"), n)):
        print(f"  {name:44} {groups[name]:7.1f} s")
    print(f"test command wall time {wall:.0f} s ({proc.returncode=}, {failed} failed)"
          + (f"; with the venv {wall + venv_s:.0f} s (target <= 600)" if venv_s is not None else ""))
    print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:])


if __name__ == "__main__":
    main()
