"""Every rank dies with the process that launched it, whatever ends that process (lab 00).

The launcher (a notebook kernel, a script, ``python -m lab_utils run``) creates a pipe and keeps
its write end; torchrun's agent and every rank forked from it inherit the read end. Each of them
runs a watchdog thread blocked on ``read()``. No one ever writes: the read returns only at
end-of-file, which the kernel delivers the moment the LAST write end closes, i.e. when the
launcher exits for any reason: a clean exit, an exception, SIGTERM (``kill PID``, coreutils
``timeout``, a supervisor), SIGKILL (the OOM killer) or a crash. The watchdog then kills the
whole process group (agent and ranks share one), so no rank is left burning the learner's cores.

Why not only ``prctl(PR_SET_PDEATHSIG)``: it fires when the parent THREAD exits, not the
process, so a pool started from a short-lived thread would die early; and it covers one level
of the tree (launcher -> agent), not the ranks the agent forked. The pipe covers every level.
Caveat: a process the launcher FORKS (without exec) inherits the write end too, and keeps the
ranks alive until it exits (e.g. DataLoader workers forked by a notebook).
"""

from __future__ import annotations

import os
import signal
import threading

ENV_FD = "LAB_UTILS_LIFELINE_FD"


def create() -> tuple[int, int]:
    """(read_fd, write_fd): the read end is inheritable (passed to the agent), the write end not."""
    read_fd, write_fd = os.pipe()
    os.set_inheritable(read_fd, True)
    return read_fd, write_fd


def _watch(fd: int) -> None:
    try:
        while os.read(fd, 1):  # nobody writes: this returns b"" only when the launcher is gone
            pass
    except OSError:
        pass
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)  # the agent and every rank: one process group
    finally:
        os._exit(1)


def watch_from_env() -> None:
    """Start the watchdog on the fd named by LAB_UTILS_LIFELINE_FD (no-op when absent).

    Called by the agent at start-up and by each rank after it is forked (threads do not
    survive a fork, so every process starts its own).
    """
    fd = os.environ.get(ENV_FD)
    if fd is None:
        return
    try:
        os.fstat(int(fd))
    except (OSError, ValueError):
        return  # not inherited here (e.g. a cluster launch that copied the environment)
    threading.Thread(target=_watch, args=(int(fd),), name="lab_utils-lifeline", daemon=True).start()
