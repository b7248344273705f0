"""Where the test command's time goes (issue 12): venv, unit tests, multi-rank tests, each notebook.

    .venv/bin/python benchmarks/bench_ci.py [--jobs 4] [--no-venv] [test paths; default: all]

1. venv: a fresh virtual environment in a temporary folder, built by `make`'s own recipe (uv and
   pip caches warm, as on a machine that ran it before).
2. The test command itself (`make test`'s pytest line, `--junitxml`), wall-clock time, then the time
   its test cases took, summed per group: unit tests, multi-rank tests, the browser test, and per
   notebook its nbval run (quick) and its papermill run (full). With several workers the groups
   overlap, so the sums exceed the wall time; the wall time is what CI waits for.
3. CPU seconds per group (user + sys of each test's worker and the processes it reaped:
   benchmarks/cpu_per_test.py), their total, and what it implies: on N cores the command cannot take
   less than total CPU / N, however the workers are packed. Notebook runs under nbval start an inner
   pytest that is counted once, inside its outer test.
4. The whole command's CPU as the kernel counted it, where a cgroup v1 cpuacct hierarchy is writable
   (root on Linux): every descendant, including the processes that outlived their parent and were
   reaped by init (ranks of a killed agent, a zygote after its kernel), which rusage (3.) never
   sees.
   On the 2-core machine 3. read 1285 s where the cgroup read 2107-2266 s.
Target: venv + test command <= 10 minutes on the 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from testsplit import ROOT, read_junit, test_files


def time_venv() -> float:
    """`make`'s own venv recipe, into a temporary folder (VENV=...), so the two never drift
    apart."""
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        start = time.perf_counter()
        subprocess.run(
            ["make", "--no-print-directory", f"VENV={venv}", f"{venv}/.installed"],
            check=True,
            cwd=ROOT,
            capture_output=True,
        )
        return time.perf_counter() - start


CGROUP_ROOT = Path("/sys/fs/cgroup/cpuacct")


def cpu_cgroup() -> Path | None:
    """A fresh cgroup v1 cpuacct group for the test command, or None where none can be made."""
    group = CGROUP_ROOT / f"bench_ci_{os.getpid()}"
    try:
        group.mkdir()
        return group
    except OSError:
        return None


def group_cpu_s(group: Path) -> float:
    """CPU seconds of everything that ran in the group; then the group is removed."""
    time.sleep(2)  # the last processes reaped by init
    seconds = int(group.joinpath("cpuacct.usage").read_text()) / 1e9
    try:
        group.rmdir()
    except OSError:
        pass  # a process still in it (one that outlived the command): left for the next boot
    return seconds


def group_of(test_id: str, unit: set[str], multi: set[str]) -> str:
    """'tests/test_x.py::name[param]' -> its group: unit, multi-rank, browser, or one notebook
    run."""
    file = test_id.split("::")[0]
    file = file if file.endswith(".py") else file + ".py"
    if "test_quick_mode_runs_under_nbval[" in test_id:
        return f"notebook {test_id.split('[')[1].rstrip(']')} quick (nbval)"
    if "test_full_mode_runs[" in test_id:
        return f"notebook {test_id.split('[')[1].rstrip(']')} full (papermill)"
    if file in multi:
        return "multi-rank tests"
    if file in unit:
        return "unit tests"
    return f"other: {file}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--no-venv", action="store_true", help="skip timing a fresh venv")
    parser.add_argument(
        "tests", nargs="*", default=["tests"], help="what to run (default: every test)"
    )
    ns = parser.parse_args()
    venv_s = None if ns.no_venv else time_venv()
    report = ROOT / "build" / "bench_ci.xml"
    report.parent.mkdir(exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-n",
        str(ns.jobs),
        "--dist",
        "worksteal",
        *ns.tests,
        f"--junitxml={report}",
    ]
    cpu_log = ROOT / "build" / "bench_ci_cpu.jsonl"
    cpu_log.unlink(missing_ok=True)
    env = dict(
        os.environ,
        CPU_PER_TEST_OUT=str(cpu_log),
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")])
        ),
    )
    cmd[4:4] = ["-p", "cpu_per_test"]
    group = cpu_cgroup()
    start = time.perf_counter()
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=(lambda: group.joinpath("tasks").write_text(str(os.getpid())))
        if group
        else None,
    )
    wall = time.perf_counter() - start
    kernel_cpu = group_cpu_s(group) if group else None
    unit, multi = set(test_files()[0]), set(test_files()[1])
    groups: dict[str, float] = defaultdict(float)
    failed = 0
    for case in read_junit(report):
        failed += case.failed
        groups[
            group_of(case.id.replace("tests.", "tests/", 1).replace(".py", ""), unit, multi)
        ] += case.seconds
    cpu: dict[str, float] = defaultdict(float)
    if cpu_log.exists():
        for line in cpu_log.read_text().splitlines():
            row = json.loads(line)
            if row["id"] == "(worker exit)":  # pools, zygotes and their agents, reaped at the end
                cpu["worker exit (pools, zygotes)"] += row["own"] + row["children"]
            elif row["id"].startswith(
                "tests/"
            ):  # not the cells of an inner nbval run (counted in its test)
                cpu[group_of(row["id"], unit, multi)] += row["own"] + row["children"]
    cores = os.cpu_count() or 1
    print(f"load average {os.getloadavg()[0]:.1f} on {cores} cores, {ns.jobs} workers")
    if venv_s is not None:
        print(f"  {'venv (fresh, make recipe, caches warm)':44} {venv_s:7.1f} s")
    print(f"  {'group':44} {'wall':>7}   {'CPU':>7}  (seconds; wall sums overlap across workers)")
    for name in sorted(set(groups) | set(cpu), key=lambda n: (n.startswith("notebook"), n)):
        print(f"  {name:44} {groups.get(name, 0.0):7.1f}   {cpu.get(name, 0.0):7.1f}")
    total = sum(cpu.values())
    print(
        f"CPU of all tests {total:.0f} s: on {cores} cores no packing finishes them in under "
        f"{total / cores:.0f} s"
    )
    if kernel_cpu is not None:
        print(
            f"CPU of the whole command as the kernel counted it (cgroup cpuacct, orphans included) "
            f"{kernel_cpu:.0f} s: floor {kernel_cpu / cores:.0f} s on {cores} cores"
        )
    else:
        print("(no writable cgroup v1 cpuacct here: the CPU above misses processes reaped by init)")
    print(
        f"test command wall time {wall:.0f} s ({proc.returncode=}, {failed} failed)"
        + (f"; with the venv {wall + venv_s:.0f} s (target <= 600)" if venv_s is not None else "")
    )
    print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:])


if __name__ == "__main__":
    main()
