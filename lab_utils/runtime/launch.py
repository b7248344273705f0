"""Launch a function on N real ranks and get each rank's return value back (lab 00).

    results = run(fn, 4, tensor_size=8)     # fn(ctx, tensor_size=8) on ranks 0..3
    results[2]                              # what rank 2 returned

How it works: ``fn`` and its arguments are pickled with cloudpickle (so a function
defined in a notebook cell travels by value), then ``torchrun --standalone`` - the same
launcher used on clusters - starts the ranks. Locally the ranks are forked from
torchrun's agent (``--run-path --start-method fork``), which has already imported
torch, so N ranks start about as fast as one ``import torch``. Each rank runs
``lab_utils/runtime/worker.py``, which writes its return value or traceback to a temporary
folder.

Failure handling, the part a notebook needs most:
  * a rank raises -> the others are stopped, and one RankFailure names the rank(s)
    and shows the original traceback;
  * a rank is stuck in a collective -> it raises the process group's timeout (set
    short), or the launcher's own deadline ends the run; RankTimeout names the ranks
    that did not finish;
  * Ctrl-C / "interrupt kernel" -> every child is killed (they share one process group).
"""
from __future__ import annotations

import atexit
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable

import cloudpickle

from lab_utils.runtime.failures import (RankFailure, RankTimeout, dead_ranks, failure,  # noqa: F401
                                fmt_ranks, read_records, read_stacks, request_stacks)

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
RESULT_GRACE_S = 1.0  # after a first failure, how long to wait for the other ranks' reports
TEARDOWN_GRACE_S = 5.0  # after every result is in, how long teardown may take before a kill
_LIVE: set[subprocess.Popen] = set()  # torchrun processes still running, for atexit


class RunResults(list):
    """Per-rank return values, indexed by rank, plus facts about the run."""

    elapsed_s: float
    backend: str
    world_size: int
    oversubscribed: bool
    clean_exit: bool  # every rank finished barrier + destroy_process_group and left on its own
    log: list[str]


def cpu_cores() -> int:
    """Cores this process may use (respects taskset / container limits)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def oversubscription_note(world_size: int, backend: str) -> str | None:
    """The honest-timing warning: more CPU ranks than cores means ranks take turns."""
    cores = cpu_cores()
    if backend == "gloo" and world_size > cores:
        return (f"note: {world_size} ranks share {cores} CPU cores, so ranks take turns on the "
                "cores: wall-clock timings measure this machine, not the parallel schedule.")
    return None


def _validate(fn: Callable, world_size: Any, timeout_s: float) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int (number of ranks), got {world_size!r} "
                        f"of type {type(world_size).__name__}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not callable(fn):
        raise TypeError(f"fn must be a function taking (ctx, ...), got {fn!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")


def _validate_preload(preload: tuple[str, ...]) -> None:
    import importlib.util

    for name in preload:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ValueError(f"preload: no module named {name!r} (give importable module names, "
                             "e.g. 'torch.distributed.pipelining')")


def _pickle_payload(fn: Callable, args: tuple, kwargs: dict, options: dict) -> bytes:
    try:
        return cloudpickle.dumps((fn, args, kwargs, options))
    except Exception as exc:
        raise TypeError(
            f"could not send {getattr(fn, '__name__', fn)!r} and its arguments to the ranks: "
            f"{type(exc).__name__}: {exc}. Everything a rank needs is pickled; objects such as "
            "open files, locks, generators or process groups cannot be. Create them inside "
            "the function instead, and pass plain values (numbers, strings, tensors)."
        ) from None


def _resolve_backend(backend: str, world_size: int) -> str:
    from lab_utils.runtime.context import resolve_backend  # deferred: it imports torch

    return resolve_backend(backend, world_size)  # one node: local world size = world size


def torchrun_command(world_size: int, payload_path: str, out_dir: str) -> list[str]:
    """torchrun on this machine only, with its ranks forked from the agent.

    This is ``--standalone`` spelled out, with one change: the rendezvous address is the
    NUMBER 127.0.0.1, not the name localhost. A forked rank must never resolve a host
    name: if another agent thread held glibc's resolver lock at the moment of the fork,
    the rank waits on that lock forever (seen here about once in 20 launches).
    """
    return [
        sys.executable, "-m", "lab_utils.runtime.agent",  # torchrun, after importing LAB_UTILS_PRELOAD
        "--nnodes", "1", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "127.0.0.1:0",  # port 0: a free port, so two runs never collide
        "--rdzv-id", uuid.uuid4().hex,
        "--nproc-per-node", str(world_size),
        "--monitor-interval", "0.1",
        "--run-path", "--start-method", "fork",  # ranks fork from the agent: torch already imported
        WORKER_PATH, payload_path, out_dir,
    ]


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun's whole process group (agent + every rank) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    _LIVE.discard(proc)


@atexit.register
def _kill_all_live() -> None:
    for proc in list(_LIVE):
        _kill_group(proc)


def _reader(stream, lines: "queue.Queue[str | None]") -> None:
    for raw in iter(stream.readline, b""):
        lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
    lines.put(None)


def run(fn: Callable, world_size: int, *args: Any, backend: str = "auto", timeout_s: float = 120.0,
        pg_timeout_s: float | None = None, quiet: bool = False, threads: int | None = None,
        preload: tuple[str, ...] = (), **kwargs: Any) -> RunResults:
    """Run ``fn(ctx, *args, **kwargs)`` on ``world_size`` ranks; return each rank's result.

    backend:       "auto" (NCCL with one GPU per rank if there are enough GPUs, else gloo
                   on CPU), "gloo" or "nccl".
    timeout_s:     deadline for the whole run; ranks still running then are named and killed.
    pg_timeout_s:  process-group timeout inside the ranks (default: 3/4 of timeout_s), so a
                   rank stuck in a collective raises - with a traceback showing where -
                   before the deadline.
    quiet:         do not echo the ranks' output live (it is still in ``results.log``).
    threads:       intra-op threads per rank (default: cores // ranks, at least 1).
    preload:       modules to import once before the ranks are forked, e.g.
                   ("torch.distributed.pipelining",): paid once instead of once per rank.

    Raises RankFailure (a rank raised) or RankTimeout (ranks did not finish).
    """
    _validate(fn, world_size, timeout_s)
    _validate_preload(tuple(preload))
    backend = _resolve_backend(backend, world_size)
    pg_timeout_s = pg_timeout_s if pg_timeout_s is not None else 0.75 * timeout_s
    threads = threads or max(1, cpu_cores() // world_size)
    options = {"backend": backend, "pg_timeout_s": pg_timeout_s, "threads": threads}
    payload = _pickle_payload(fn, args, kwargs, options)

    note = oversubscription_note(world_size, backend)
    if note and not quiet:
        print(f"[lab_utils] {note}", flush=True)

    tmp = tempfile.mkdtemp(prefix="lab_utils_run_")
    payload_path = os.path.join(tmp, "payload.pkl")
    with open(payload_path, "wb") as f:
        f.write(payload)
    # The ranks import what the caller can import: a function defined in a test module or a
    # script travels by reference, so its module must be importable on the ranks too.
    python_path = os.pathsep.join(dict.fromkeys([PACKAGE_ROOT, *(p for p in sys.path if p)]))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), LAB_UTILS_ROOT=PACKAGE_ROOT,
               PYTHONPATH=python_path,
               PYTHONUNBUFFERED="1", LAB_UTILS_PRELOAD=",".join(preload),
               # gloo picks its network interface by resolving the host name unless told;
               # name it, so forked ranks never enter the resolver (see torchrun_command)
               GLOO_SOCKET_IFNAME="lo")
    start = time.perf_counter()
    proc = subprocess.Popen(torchrun_command(world_size, payload_path, tmp), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)  # own process group: one killpg ends them all
    _LIVE.add(proc)
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    log: list[str] = []
    first_error_at: float | None = None
    all_done_at: float | None = None
    exited: set[str] = set()
    deadline_hit = False
    next_progress = start + 10.0
    try:
        while True:
            try:
                line = lines.get(timeout=0.05)
            except queue.Empty:
                line = ""
            if line:
                log.append(line)
                if not quiet and line.startswith("[rank "):
                    print(line, flush=True)
            now = time.perf_counter()
            names = os.listdir(tmp)
            done = {int(n[4:-3]) for n in names if n.endswith(".ok")}
            exited = {n for n in names if n.endswith(".done")}
            failed = any(n.endswith(".err") for n in names)
            if failed and first_error_at is None:
                first_error_at = now
            if len(exited) == world_size:
                break  # every rank reported and tore down cleanly
            if len(done) == world_size:
                all_done_at = all_done_at or now
                if now - all_done_at > TEARDOWN_GRACE_S:
                    break  # results are safe; a teardown this slow is reported, not waited for
            if line is None or (proc.poll() is not None and lines.empty()):
                break
            if first_error_at is not None and now - first_error_at > RESULT_GRACE_S:
                break  # give the others a moment to report, then stop them
            if now - start > timeout_s:
                deadline_hit = True
                break
            if not quiet and now > next_progress:
                waiting = [r for r in range(world_size) if r not in done]
                print(f"[lab_utils] {now - start:.0f} s: {len(done)}/{world_size} ranks done; "
                      f"waiting for {fmt_ranks(waiting)}", flush=True)
                next_progress = now + 10.0
    finally:
        dead = dead_ranks(tmp, world_size) if first_error_at is not None or proc.poll() is not None else []
        if deadline_hit:
            request_stacks(tmp, world_size)
        _kill_group(proc)  # no-op when torchrun already exited; kills everything otherwise
    elapsed = time.perf_counter() - start
    while True:  # drain what was printed before the kill
        try:
            line = lines.get_nowait()
        except queue.Empty:
            break
        if line:
            log.append(line)
            if not quiet and line.startswith("[rank "):
                print(line, flush=True)
    ok, err = read_records(tmp, world_size)
    stacks = read_stacks(tmp, world_size)
    for rank, record in err.items():
        record["_seen"] = os.path.getmtime(os.path.join(tmp, f"rank{rank}.err"))
    shutil.rmtree(tmp, ignore_errors=True)
    if len(ok) < world_size:  # errors after a delivered result (teardown) do not fail the run
        raise failure(ok, err, world_size, log, deadline_hit, timeout_s, stacks, dead)

    results = RunResults(ok[r] for r in range(world_size))
    results.elapsed_s = elapsed
    results.backend = backend
    results.world_size = world_size
    results.oversubscribed = note is not None
    results.clean_exit = len(exited) == world_size
    results.log = log
    if not results.clean_exit and not quiet:
        print(f"[lab_utils] warning: {world_size - len(exited)} rank(s) did not finish tearing down "
              f"within {TEARDOWN_GRACE_S:g} s and were killed (results are complete)", flush=True)
    return results
