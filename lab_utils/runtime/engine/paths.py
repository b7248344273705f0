"""Where the engine's things are, and what this machine gives it: the package root, the entry
programs, run folders (``$TMPDIR/lab_utils_run_*``, stamped with their owner's pid and start time,
removed by a later launch once the owner is gone), /proc fields and the usable cores.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
WORKER_PATH = os.path.join(os.path.dirname(_HERE), "worker.py")  # the rank program
TMP_PREFIX = "lab_utils_run_"
AGENT = [sys.executable, "-m", "lab_utils.runtime.engine.agent"]  # torchrun after the preloads


def cpu_cores() -> int:
    """Cores this process may use (respects taskset / container limits)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def stat_fields(pid: int | str) -> list[str]:
    """/proc/PID/stat from field 3 (state) on: index i is field i + 3 of proc(5). The command name
    (field 2) may hold spaces and parentheses, so the split starts after its last ')'."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def _start_time(pid: int) -> str | None:
    try:
        return stat_fields(pid)[19]  # field 22: start time since boot
    except (OSError, IndexError):
        return None


def make_run_dir() -> str:
    """A fresh folder for one run (or one pool), stamped with its owner process."""
    clean_stale_run_dirs()
    path = tempfile.mkdtemp(prefix=TMP_PREFIX)
    with open(os.path.join(path, "owner"), "w") as f:
        f.write(f"{os.getpid()} {_start_time(os.getpid())}")
    return path


def clean_stale_run_dirs() -> None:
    """Remove run folders whose owner process is gone (a killed kernel, a restart)."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if not name.startswith(TMP_PREFIX) or not os.path.isdir(path):
            continue
        try:
            with open(os.path.join(path, "owner")) as f:
                pid, started = f.read().split()
            alive = _start_time(int(pid)) == started
        except (OSError, ValueError):  # no owner file: a folder from an older version
            alive = time.time() - os.path.getmtime(path) < 3600
        if not alive:
            shutil.rmtree(path, ignore_errors=True)
