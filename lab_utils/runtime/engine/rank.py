"""What every launcher-started rank does, cold or pooled (lab 00): prefixed output, marks
in the run's folder (``.ok`` result, ``.err`` traceback, ``.term`` stopped, ``.stack``,
``forked<k>``), the start line, and a clean or immediate exit. ``worker.py`` is the entry point.
"""

from __future__ import annotations

import faulthandler
import io
import os
import signal
import sys
import time
import traceback
from typing import Any

import cloudpickle

from lab_utils.runtime.engine import lifeline, peer_note

PREFIX_FMT = "[rank {rank}] "


class RankPrefixStream(io.TextIOBase):
    """A text stream that writes whole lines, each prefixed with the rank.

    Whole lines matter: several ranks share one pipe, and one write() of a line
    shorter than PIPE_BUF (4 KiB) cannot be interleaved with another process's.
    """

    def __init__(self, raw_fd: int, rank: int) -> None:
        self._fd = raw_fd
        self._prefix = PREFIX_FMT.format(rank=rank)
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            os.write(self._fd, (self._prefix + line + "\n").encode("utf-8", "replace"))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.write("\n")


def write_atomic(path: str, obj: Any) -> None:
    """Write then rename, so the launcher never reads a half-written file."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        cloudpickle.dump(obj, f)
    os.replace(tmp, path)


def error_record(exc: BaseException) -> dict:
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
    }


def exit_now(code: int) -> None:
    """Flush and leave without running interpreter shutdown.

    Static destructors of gloo/c10d objects during a normal interpreter exit are where
    the "terminate called without an active exception" abort happens; by now every
    result is on disk, so skipping them loses nothing.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def install_prefix_streams(rank: int) -> None:
    sys.stdout = RankPrefixStream(sys.stdout.fileno(), rank)
    sys.stderr = RankPrefixStream(sys.stderr.fileno(), rank)


def wait_until_all_forked(out_dir: str, rank: int, world_size: int, timeout_s: float) -> None:
    """Start line: no rank touches the network until every rank has been forked.

    The ranks are forked from torchrun's agent, whose store server thread resolves the
    address of each connection it accepts (getnameinfo), holding glibc's resolver lock.
    A rank forked at that instant inherits the lock held and blocks forever at its first
    connection (seen about once in 20 launches). When every rank has written its mark,
    the agent has finished forking, so connections from then on are safe.
    """
    with open(os.path.join(out_dir, f"forked{rank}"), "w") as f:
        f.write(str(os.getpid()))  # the launcher signals this pid for a stack dump on a hang
    deadline = time.monotonic() + timeout_s
    while sum(n.startswith("forked") for n in os.listdir(out_dir)) < world_size:
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank}: not every rank started within {timeout_s:g} s")
        time.sleep(0.002)


class Marks:
    """Where this rank leaves its marks (the run's folder, or the pooled job's)."""

    folder = ""


def write_record(folder: str, rank: int, suffix: str, value: Any) -> None:
    write_atomic(os.path.join(folder, f"rank{rank}.{suffix}"), value)


def report_result(folder: str, rank: int, value: Any) -> bool:
    """rank<k>.ok, or rank<k>.err if the value cannot be pickled; True if delivered."""
    try:
        write_record(folder, rank, "ok", value)
        return True
    except Exception as exc:  # e.g. a return value that cannot be pickled
        write_record(
            folder,
            rank,
            "err",
            error_record(
                TypeError(
                    f"rank {rank} finished, but its return value could not be sent back: {exc}. "
                    "Return plain Python values, numbers or CPU tensors."
                )
            ),
        )
        return False


def rank_setup(run_dir: str, rank: int, world_size: int, timeout_s: float) -> None:
    """What every launcher-started rank does first: marks, signals, start line."""
    # Numbers, not names: a forked rank should not need the resolver at all.
    if os.environ.get("MASTER_ADDR") == "localhost":
        os.environ["MASTER_ADDR"] = "127.0.0.1"
    install_prefix_streams(rank)
    lifeline.watch_from_env()  # the launcher is gone -> so is this rank
    Marks.folder = run_dir

    # torchrun's agent SIGTERMs the surviving ranks when one dies. Its own handler (inherited
    # through the fork) would raise SignalException inside whatever this rank was doing and
    # report THAT as the error; instead, leave a mark that says "stopped, not failed".
    def _stopped(signum, frame):
        open(os.path.join(Marks.folder, f"rank{rank}.term"), "w").close()
        exit_now(128 + signum)

    signal.signal(signal.SIGTERM, _stopped)
    dump_stacks_to(run_dir, rank)
    wait_until_all_forked(run_dir, rank, world_size, timeout_s)


def dump_stacks_to(folder: str, rank: int) -> None:
    """On a hang, the launcher sends SIGUSR1 before killing: the rank's Python stack lands in
    ``rank<k>.stack``, so the message can show the line where the rank was waiting. A fatal
    signal (gloo's abort on a collective mismatch, a segfault) leaves ``rank<k>.fatal``: the
    rank is named with what killed it and where, not as a rank that vanished."""
    stack_file = open(os.path.join(folder, f"rank{rank}.stack"), "w")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=False)
    faulthandler.enable(file=open(os.path.join(folder, f"rank{rank}.fatal"), "w"), all_threads=True)
    peer_note.note_to(folder, rank)  # and the peer of a blocking send/recv it is inside
