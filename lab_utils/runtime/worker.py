"""The program every rank runs (lab 00).

Two ways in, one code path:

* From the course launcher (``lab_utils.run``): torchrun forks this file with
  ``--run-path`` and passes ``<payload.pkl> <out_dir>``. The payload is
  ``(fn, args, kwargs, options)`` pickled with cloudpickle, so ``fn`` may be defined
  in a notebook cell. The return value (or the traceback) is written to
  ``out_dir/rank<k>.ok`` (or ``.err``) for the launcher to collect.
* On a cluster: ``torchrun ... -m lab_utils.runtime.worker --target pkg.module:function``
  (what ``python -m lab_utils run ... --print-command`` prints). Results are printed.

Each rank's stdout/stderr lines get a ``[rank k]`` prefix so the launcher (and a
human reading a cluster log) can tell the ranks apart.
"""
from __future__ import annotations

import argparse
import faulthandler
import importlib
import io
import os
import pickle
import signal
import sys
import time
import traceback
from typing import Any, Callable

# torchrun's --run-path runs this file by path, so the package may not be importable
# from sys.path yet; the launcher exports LAB_UTILS_ROOT for exactly this.
_root = os.environ.get("LAB_UTILS_ROOT")
if _root and _root not in sys.path:
    sys.path.insert(0, _root)

import cloudpickle  # noqa: E402

from lab_utils.runtime.context import distributed  # noqa: E402

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


def _write_atomic(path: str, obj: Any) -> None:
    """Write then rename, so the launcher never reads a half-written file."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        cloudpickle.dump(obj, f)
    os.replace(tmp, path)


def _error_record(exc: BaseException) -> dict:
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
    }


def _exit(code: int) -> None:
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


def run_rank(fn: Callable, args: tuple, kwargs: dict, backend: str, pg_timeout_s: float,
             on_result: Callable[[int, Any], None], on_error: Callable[[int, dict], None]) -> int:
    """Run fn(ctx, *args, **kwargs) on this rank; report through the callbacks; exit code.

    A rank whose fn raised leaves the process at once (``_exit``), never through the
    context manager's clean exit, whose barrier the other ranks would never join.
    """
    rank = int(os.environ.get("RANK", "0"))
    delivered = False
    try:
        with distributed(backend, pg_timeout_s) as ctx:
            try:
                result = fn(ctx, *args, **kwargs)
            except BaseException as exc:
                # Report first, then leave at once: the other ranks may be stuck in a
                # collective this rank will never join, so no barrier, no teardown.
                on_error(rank, _error_record(exc))
                _exit(1)
            on_result(rank, result)
            delivered = True
    except BaseException as exc:  # set-up failed (e.g. rendezvous), or teardown did
        if delivered:
            # This rank's work is done and reported; its teardown barrier failed because
            # ANOTHER rank is stuck or gone. That rank is the story, not this one.
            return 1
        on_error(rank, _error_record(exc))
        return 1
    return 0


def _install_prefix_streams(rank: int) -> None:
    sys.stdout = RankPrefixStream(sys.stdout.fileno(), rank)
    sys.stderr = RankPrefixStream(sys.stderr.fileno(), rank)


def _wait_until_all_forked(out_dir: str, rank: int, world_size: int, timeout_s: float) -> None:
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


def _launcher_main(payload_path: str, out_dir: str) -> int:
    rank = int(os.environ["RANK"])
    # Numbers, not names: a forked rank should not need the resolver at all.
    if os.environ.get("MASTER_ADDR") == "localhost":
        os.environ["MASTER_ADDR"] = "127.0.0.1"
    _install_prefix_streams(rank)
    with open(payload_path, "rb") as f:
        fn, args, kwargs, options = pickle.load(f)

    def on_result(r: int, value: Any) -> None:
        try:
            _write_atomic(os.path.join(out_dir, f"rank{r}.ok"), value)
        except Exception as exc:  # e.g. a return value that cannot be pickled
            on_error(r, _error_record(TypeError(
                f"rank {r} finished, but its return value could not be sent back: {exc}. "
                "Return plain Python values, numbers or CPU tensors.")))

    def on_error(r: int, record: dict) -> None:
        _write_atomic(os.path.join(out_dir, f"rank{r}.err"), record)

    # torchrun's agent SIGTERMs the surviving ranks when one dies. Its own handler (inherited
    # through the fork) would raise SignalException inside whatever this rank was doing and
    # report THAT as the error; instead, leave a mark that says "stopped, not failed".
    def _stopped(signum, frame):
        open(os.path.join(out_dir, f"rank{rank}.term"), "w").close()
        _exit(128 + signum)

    signal.signal(signal.SIGTERM, _stopped)
    # On a hang, the launcher sends SIGUSR1 before killing: the rank's Python stack lands
    # in a file, so the message can show the line where the rank was waiting.
    stack_file = open(os.path.join(out_dir, f"rank{rank}.stack"), "w")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=False)
    import torch  # already imported by the forked agent: free

    torch.set_num_threads(options["threads"])
    _wait_until_all_forked(out_dir, rank, int(os.environ["WORLD_SIZE"]), options["pg_timeout_s"])
    code = run_rank(fn, args, kwargs, options["backend"], options["pg_timeout_s"], on_result, on_error)
    if code == 0:
        # Teardown finished (barrier, gc, destroy_process_group): tell the launcher this rank
        # is leaving on its own, so it can tell a clean exit from one it had to kill.
        open(os.path.join(out_dir, f"rank{rank}.done"), "w").close()
    return code


def _cluster_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab_utils.runtime.worker")
    parser.add_argument("--target", required=True, help="pkg.module:function")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--timeout", type=float, default=300.0, help="process-group timeout, s")
    ns = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    _install_prefix_streams(rank)
    module_name, _, fn_name = ns.target.partition(":")
    fn = getattr(importlib.import_module(module_name), fn_name)

    def on_result(r: int, value: Any) -> None:
        print(f"result: {value!r}", flush=True)

    def on_error(r: int, record: dict) -> None:
        print(record["traceback"], file=sys.stderr, flush=True)

    return run_rank(fn, (), {}, ns.backend, ns.timeout, on_result, on_error)


if __name__ == "__main__":
    if len(sys.argv) == 3 and not sys.argv[1].startswith("-"):
        _exit(_launcher_main(sys.argv[1], sys.argv[2]))
    _exit(_cluster_main(sys.argv[1:]))
