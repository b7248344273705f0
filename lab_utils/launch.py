"""Launch a function on N real ranks and get each rank's return value back (lab 00).

    results = run(fn, 4, tensor_size=8)     # fn(ctx, tensor_size=8) on ranks 0..3
    results[2]                              # what rank 2 returned

How it works: ``fn`` and its arguments are pickled with cloudpickle (so a function
defined in a notebook cell travels by value), then ``torchrun --standalone`` - the same
launcher used on clusters - starts the ranks. Locally the ranks are forked from
torchrun's agent (``--run-path --start-method fork``), which has already imported
torch, so N ranks start about as fast as one ``import torch``. Each rank runs
``lab_utils/_worker.py``, which writes its return value or traceback to a temporary
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
import re
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

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker.py")
RESULT_GRACE_S = 1.0  # after a first failure, how long to wait for the other ranks' reports
TEARDOWN_GRACE_S = 5.0  # after every result is in, how long teardown may take before a kill
_TIMEOUT_MARKERS = ("timed out", "timeout")  # matched case-insensitively (gloo: "Timed out waiting")
_LIVE: set[subprocess.Popen] = set()  # torchrun processes still running, for atexit


class RankFailure(RuntimeError):
    """One or more ranks raised. ``tracebacks`` maps rank -> the original traceback."""

    def __init__(self, message: str, tracebacks: dict[int, str], log: list[str], dead: list[int] = ()):
        super().__init__(message)
        self.tracebacks = tracebacks
        self.log = log
        self.dead = list(dead)  # ranks that died without a word (os._exit, segfault, OOM kill)

    @property
    def ranks(self) -> list[int]:
        return sorted(self.tracebacks)


def _process_gone(pid: int) -> bool:
    """True if pid has exited (gone, or a zombie its parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
    except OSError:  # no /proc (not Linux): fall back to a signal-0 probe
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            return True


def _dead_ranks(out_dir: str, world_size: int) -> list[int]:
    """Ranks that died on their own: no result, no error, not stopped (no .term), process gone.

    os._exit, a segfault or the kernel's OOM killer leave no traceback; the other ranks then
    fail with "connection reset by peer" - symptoms. Called BEFORE the launcher kills anything.
    """
    dead = []
    for rank in range(world_size):
        if any(os.path.exists(os.path.join(out_dir, f"rank{rank}.{s}")) for s in ("ok", "err", "term")):
            continue
        try:
            with open(os.path.join(out_dir, f"forked{rank}")) as f:
                pid = int(f.read())
        except (FileNotFoundError, ValueError):
            continue  # never started: not a death we can attribute
        if _process_gone(pid):
            dead.append(rank)
    return dead


class RankTimeout(RankFailure):
    """Some ranks did not finish in time (typically stuck in a collective)."""

    def __init__(self, message: str, tracebacks: dict[int, str], log: list[str], unfinished: list[int]):
        super().__init__(message, tracebacks, log)
        self.unfinished = unfinished


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
    from lab_utils.context import resolve_backend  # deferred: it imports torch

    return resolve_backend(backend, world_size)  # one node: local world size = world size


def torchrun_command(world_size: int, payload_path: str, out_dir: str) -> list[str]:
    """torchrun on this machine only, with its ranks forked from the agent.

    This is ``--standalone`` spelled out, with one change: the rendezvous address is the
    NUMBER 127.0.0.1, not the name localhost. A forked rank must never resolve a host
    name: if another agent thread held glibc's resolver lock at the moment of the fork,
    the rank waits on that lock forever (seen here about once in 20 launches).
    """
    return [
        sys.executable, "-m", "lab_utils._agent",  # torchrun, after importing LAB_UTILS_PRELOAD
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


def _request_stacks(out_dir: str, world_size: int) -> None:
    """Ask every unfinished rank for its Python stack (SIGUSR1 -> faulthandler, see _worker)."""
    asked = False
    for rank in range(world_size):
        mark = os.path.join(out_dir, f"forked{rank}")
        if os.path.exists(os.path.join(out_dir, f"rank{rank}.ok")) or not os.path.exists(mark):
            continue
        try:
            with open(mark) as f:
                os.kill(int(f.read()), signal.SIGUSR1)
            asked = True
        except (ValueError, ProcessLookupError):
            pass
    if asked:
        time.sleep(0.3)  # faulthandler writes from a signal handler: immediate, but not instant


def _read_stacks(out_dir: str, world_size: int) -> dict[int, str]:
    stacks = {}
    for rank in range(world_size):
        path = os.path.join(out_dir, f"rank{rank}.stack")
        if os.path.exists(path):
            with open(path) as f:
                text = f.read().strip()
            # keep the learner's frames: everything above the worker's own run_rank frame
            lines = text.splitlines()
            cut = next((i for i, line in enumerate(lines) if "_worker.py" in line and "run_rank" in line),
                       len(lines))
            if cut > 1:
                stacks[rank] = "\n".join(lines[:cut])
    return stacks


def _read_records(out_dir: str, world_size: int) -> tuple[dict[int, Any], dict[int, dict]]:
    ok, err = {}, {}
    for rank in range(world_size):
        for suffix, store in (("ok", ok), ("err", err)):
            path = os.path.join(out_dir, f"rank{rank}.{suffix}")
            if os.path.exists(path):
                with open(path, "rb") as f:
                    store[rank] = cloudpickle.load(f)
    return ok, err


def _short(message: str) -> str:
    """First sentence of an error, without gloo's "[/path/to/pair.cc:553]" prefix."""
    message = re.sub(r"^\[[^\]]*\]\s*", "", message.strip())
    first = re.split(r"(?<=\.)\s", message, maxsplit=1)[0]
    return first if len(first) <= 90 else first[:87] + "..."


def _fmt_ranks(ranks) -> str:
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _failure(ok: dict, err: dict, world_size: int, log: list[str], deadline_hit: bool,
             timeout_s: float, stacks: dict[int, str], dead: list[int]) -> RankFailure:
    """Turn the ranks' reports into one readable exception."""
    # A rank that delivered its result is finished, whatever its teardown did afterwards.
    err = {r: rec for r, rec in err.items() if r not in ok}
    unfinished = [r for r in range(world_size) if r not in ok]
    tracebacks = {r: rec["traceback"] for r, rec in err.items()}
    all_timeouts = bool(err) and all(any(m in rec["message"].lower() for m in _TIMEOUT_MARKERS)
                                     for rec in err.values())
    if deadline_hit or all_timeouts:
        why = ("the process group's timeout expired in the waiting ranks" if all_timeouts
               else f"the run's deadline of {timeout_s:g} s passed")
        msg = (f"{_fmt_ranks(unfinished)} did not finish: {why}. "
               + (f"Finished: {_fmt_ranks(ok)}. " if ok else "")
               + "A rank stuck in a collective usually means the ranks did not call the same "
               "collectives in the same order (an `if rank == 0:` around a collective, uneven "
               "batches giving one rank an extra step, a send without its recv).")
        if tracebacks:
            first = min(tracebacks)
            msg += f"\n\nWhere rank {first} was waiting:\n{tracebacks[first]}"
        elif stacks:
            first = min(stacks)
            msg += f"\n\nWhere rank {first} was waiting (its Python stack at the deadline, innermost first):\n{stacks[first]}"
            tracebacks = dict(stacks)
        return RankTimeout(msg, tracebacks, log, unfinished)
    if dead:
        last_words = [line for line in log if any(line.startswith(f"[rank {r}] ") for r in dead)][-5:]
        msg = (f"{_fmt_ranks(dead)} died without reporting an error (os._exit, a segfault, or killed "
               "by the operating system, e.g. out of memory)."
               + (f"\n{_fmt_ranks(err)} failed after it: "
                  + "; ".join(sorted({f"{rec['type']}: {_short(rec['message'])}" for rec in err.values()}))
                  + " - symptoms of the lost rank, not causes." if err else "")
               + ("\nLast output of the dead rank(s):\n" + "\n".join(last_words) if last_words else ""))
        return RankFailure(msg, tracebacks, log, dead)
    if not err:
        tail = "\n".join(log[-30:])
        return RankFailure(f"{_fmt_ranks(unfinished)} exited without reporting a result (killed, "
                           f"out of memory, or os._exit?). Last output:\n{tail}", {}, log)
    first = min(err, key=lambda r: (err[r].get("_seen", 0), r))
    followers = [r for r in err if r != first]
    stopped = [r for r in unfinished if r not in err]
    msg = (f"rank {first} raised {err[first]['type']}: {err[first]['message']}"
           + (f"\n({_fmt_ranks(followers)} failed after it, typically a lost connection to rank {first})"
              if followers else "")
           + (f"\n({_fmt_ranks(stopped)} stopped by the launcher)" if stopped else "")
           + f"\n\nOriginal traceback on rank {first}:\n{err[first]['traceback']}")
    return RankFailure(msg, tracebacks, log)


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
                      f"waiting for {_fmt_ranks(waiting)}", flush=True)
                next_progress = now + 10.0
    finally:
        dead = _dead_ranks(tmp, world_size) if first_error_at is not None or proc.poll() is not None else []
        if deadline_hit:
            _request_stacks(tmp, world_size)
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
    ok, err = _read_records(tmp, world_size)
    stacks = _read_stacks(tmp, world_size)
    for rank, record in err.items():
        record["_seen"] = os.path.getmtime(os.path.join(tmp, f"rank{rank}.err"))
    shutil.rmtree(tmp, ignore_errors=True)
    if len(ok) < world_size:  # errors after a delivered result (teardown) do not fail the run
        raise _failure(ok, err, world_size, log, deadline_hit, timeout_s, stacks, dead)

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
