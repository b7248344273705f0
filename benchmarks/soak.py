"""The flake hunt (`make soak`): the multi-rank tests and the notebooks, again and again.

    .venv/bin/python benchmarks/soak.py [--test-runs 20] [--notebook-runs 5] [--jobs 4]
    [--browser-runs 1]
                                        [--max-minutes M]

Runs every multi-rank test file --test-runs times and every notebook --notebook-runs times in quick
mode (nbval, tests/test_notebooks.py), each pass on --jobs pytest-xdist workers (load on purpose: a
race shows up sooner
under load), then prints one row per test id that ever failed, and a total. A flake found here is
fixed at its cause, never retried away. Last, the browser test (--browser-runs times) with the
page's CPU throttled 20x
(LAB_BROWSER_CPU_THROTTLE, tests/test_browser.py). Exit status 1 if anything failed.

The passes of the two kinds alternate (tests, notebooks, tests, ...), so that a soak cut short by
--max-minutes (no new pass starts after that; the full soak takes about 4 hours on 2 cores) has
covered both. The table says how many passes of each kind ran.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict

from testsplit import ROOT, read_junit, test_files


def one_pass(
    targets: list[str], jobs: int, report, env_extra: dict[str, str] | None = None
) -> float:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-n",
        str(jobs),
        f"--junitxml={report}",
        *targets,
    ]
    start = time.perf_counter()
    # the spawn-harness teardown test at the 30 runs and 20 cold launches (the suite: 6
    # each)
    env = dict(os.environ, LAB_TEARDOWN_RUNS="30", LAB_LAUNCH_RUNS="20", **(env_extra or {}))
    subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def interleave(first: list, second: list) -> list:
    """[a, b, a, b, a, a] for 4 a's and 2 b's: alternate while both last."""
    out = []
    for i in range(max(len(first), len(second))):
        out += first[i : i + 1] + second[i : i + 1]
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--test-runs", type=int, default=20)
    parser.add_argument("--notebook-runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument(
        "--browser-runs", type=int, default=1, help="the browser test, CPU throttled 20x"
    )
    parser.add_argument("--max-minutes", type=float, default=None, help="start no pass after this")
    ns = parser.parse_args()
    out = ROOT / "build" / "soak"
    out.mkdir(parents=True, exist_ok=True)
    _, multi = test_files()
    notebooks = ["tests/test_notebooks.py::test_quick_mode_runs_under_nbval"]
    n_labs = len(list((ROOT / "labs").glob("[0-9][0-9]_*.ipynb")))
    runs: dict[str, int] = defaultdict(int)
    failures: dict[str, list[str]] = defaultdict(list)
    plan = interleave(
        [("tests", multi)] * ns.test_runs, [("notebooks", notebooks)] * ns.notebook_runs
    )
    plan += [
        ("slow-browser", ["tests/test_browser.py"])
    ] * ns.browser_runs  # 20x CPU throttling: see that file
    done: dict[str, int] = defaultdict(int)
    began = time.monotonic()
    for i, (kind, targets) in enumerate(plan):
        if ns.max_minutes is not None and time.monotonic() - began > 60 * ns.max_minutes:
            print(
                f"--max-minutes {ns.max_minutes:g} reached: {len(plan) - i} of {len(plan)} passes "
                f"not run",
                flush=True,
            )
            break
        done[kind] += 1
        report = out / f"{kind}_{i}.xml"
        extra = {"LAB_BROWSER_CPU_THROTTLE": "20"} if kind == "slow-browser" else None
        seconds = one_pass(targets, ns.jobs, report, extra)
        cases = read_junit(report) if report.exists() else []
        bad = [c for c in cases if c.failed]
        for c in cases:
            runs[c.id] += 1
            if c.failed:
                failures[c.id].append(c.message)
        print(
            f"pass {i + 1}/{len(plan)} ({kind}): {len(cases)} cases, {len(bad)} failed, "
            f"{seconds:.0f} s",
            flush=True,
        )
    print(f"\n{'test id':90} {'runs':>5} {'fails':>5}  first error line")
    for key in sorted(failures, key=lambda k: -len(failures[k])):
        print(f"{key[:90]:90} {runs[key]:5} {len(failures[key]):5}  {failures[key][0]}")
    total_runs = sum(runs.values())
    print(
        f"\n{len(runs)} test ids, {total_runs} runs, {sum(len(v) for v in failures.values())} "
        f"failures "
        f"({done['tests']} passes over {len(multi)} multi-rank test files, {done['notebooks']} "
        f"over "
        f"{n_labs} notebooks (nbval, quick), {done['slow-browser']} of the throttled browser test, "
        f"{ns.jobs} workers)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
