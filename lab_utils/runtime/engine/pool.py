"""Warm ranks: a pool of torchrun ranks that outlives one ``run()`` (lab 00).

    from lab_utils import run, ranks
    run(fn, 4)            # the first call starts 4 ranks (torchrun, as always) and keeps them
    run(fn, 4)            # later calls reuse them: milliseconds instead of seconds
    pool = ranks(4)       # explicit: start (or get) the pool; pool.shutdown() ends it
    run(fn, 4, cold=True) # a fresh launch that ignores the pool (LAB_UTILS_POOL=0: always)

One pool per process, started through torchrun (the same launcher users run on clusters); each
rank sets up its process group once and then serves jobs over a Unix socket from this process
(``serve.py``). A cold run is a pool of its own that serves one job and ends
(``run_cold``). A call with another world size, backend or
distributed environment (TORCH_*, NCCL_*, GLOO_* variables) restarts it; so does any failure:
a rank that raised, hung or died is reported exactly as in a cold run, then the whole pool is
killed and the next call starts a fresh one. In a notebook that one starts at once in the
background (the "spare"), so the learner reading the error does not wait for it later; scripts and
tests, which rarely rerun the same size right after a failure, do not pay for one
(LAB_UTILS_SPARE=1 or 0 overrides). A run that leaves the ranks in a state the next
run must not inherit (``isolation.py``) also restarts it. While one thread uses the pool, a
second thread's run goes to a cold launch instead of waiting.

Why not ipyparallel (evaluated, see docs/CONTRIBUTING.md): its engines are started by its own
launchers and talk through a controller process; the course needs torchrun-started ranks forked
after the start line, our failure semantics (the rank that caused a failure, with its original
traceback; stacks on a hang) and the lifeline that kills every rank with its launcher.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import threading
import time
from multiprocessing.connection import Listener
from typing import Any

import cloudpickle

from lab_utils.runtime.engine import jobs
from lab_utils.runtime.engine.jobs import collect, drain, wait_for_ranks
from lab_utils.runtime.engine.paths import cpu_cores, make_run_dir
from lab_utils.runtime.engine.process import start_agent
from lab_utils.runtime.results import RunResults

START_TIMEOUT_S = 180.0  # a cold start of N ranks on a loaded laptop, with margin
# Imported once in the agent before the ranks are forked: optimizers, DDP and the ledger import
# torch._dynamo on first use (1-4 s of CPU per rank), which a pool would otherwise pay N times.
POOL_PRELOAD = ("torch._dynamo",)
_ENV_PREFIXES = ("TORCH_", "NCCL_", "GLOO_")
_POOL: "RankPool | None" = None
_SPARE: "RankPool | None" = None  # started right after a failure, adopted by the next matching call
_POOL_LOCK = threading.Lock()  # held while a job runs on the pool


def _env_key() -> tuple:
    """The distributed environment a pool was started with: part of its identity."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)))


class PoolStartError(RuntimeError):
    """The ranks of a pool did not come up (their output is in the message)."""


class RankPool:
    """N warm ranks serving jobs; see the module docstring."""

    def __init__(
        self,
        world_size: int,
        backend: str,
        preload: tuple[str, ...] = (),
        wait: bool = True,
        pg_timeout_s: float | None = None,
    ):
        self.world_size, self.backend = world_size, backend
        self.preload = tuple(dict.fromkeys(POOL_PRELOAD + tuple(preload)))
        self.key = (world_size, backend, _env_key())
        self.run_dir = make_run_dir()
        self.jobs = 0
        self.dirty = ""  # why the ranks must not serve another job ("" = healthy)
        self.pids: dict[int, int] = {}
        self.one_job = pg_timeout_s is not None  # a cold run: its group has the run's timeout
        env = {"LAB_UTILS_POOL_KEY": "", "LAB_UTILS_BACKEND": backend}
        if self.one_job:
            env["LAB_UTILS_PG_TIMEOUT"] = str(pg_timeout_s)
        authkey = os.urandom(16)
        socket_path = os.path.join(self.run_dir, "pool.sock")
        self._listener: Listener | None = Listener(socket_path, family="AF_UNIX", authkey=authkey)
        self.agent = start_agent(
            world_size,
            [self.run_dir, "--pool", socket_path],
            max(1, cpu_cores() // world_size),
            self.preload,
            dict(env, LAB_UTILS_POOL_KEY=authkey.hex()),
        )
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Block until every rank has connected (a no-op once they have)."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        try:
            self.conns = self._accept(listener)
        except BaseException:
            self.shutdown()
            raise

    def _accept(self, listener: Listener) -> list:
        """Wait until every rank has set up its process group and connected."""
        conns: dict[int, Any] = {}

        def accept_all() -> None:
            try:
                while len(conns) < self.world_size:
                    conn = listener.accept()
                    rank, pid = conn.recv()
                    conns[rank], self.pids[rank] = conn, pid
            except OSError:  # listener closed: the start failed or timed out
                pass

        thread = threading.Thread(target=accept_all, daemon=True)
        thread.start()
        log: list[str] = []
        deadline = time.perf_counter() + START_TIMEOUT_S
        while (
            len(conns) < self.world_size and time.perf_counter() < deadline and self.agent.running()
        ):
            thread.join(0.05)
            drain(self.agent, log, quiet=True)
        listener.close()
        if len(conns) < self.world_size:
            drain(self.agent, log, quiet=True)
            raise PoolStartError(
                f"{len(conns)} of {self.world_size} ranks came up "
                + (
                    "before the agent exited"
                    if not self.agent.running()
                    else f"within {START_TIMEOUT_S:g} s"
                )
                + ". Their output:\n"
                + "\n".join(log[-30:])
            )
        return [conns[r] for r in range(self.world_size)]

    def healthy(self) -> bool:
        return not self.dirty and self.agent.running()

    def fits(self, world_size: int, backend: str, preload: tuple[str, ...]) -> bool:
        """Healthy, with this size, backend, distributed environment and (at least) this preload."""
        return (
            self.key == (world_size, backend, _env_key())
            and self.healthy()
            and set(preload) <= set(self.preload)
        )

    def submit(
        self, kind: str, body: Any, options: dict, timeout_s: float, quiet: bool
    ) -> RunResults:
        """Run one job on every rank; results, or the failure (the pool is then shut down)."""
        self.wait_ready()  # a pool started with wait=False finishes starting here
        self.jobs += 1
        job_dir = os.path.join(self.run_dir, f"job{self.jobs}")
        os.mkdir(job_dir)
        for rank, pid in self.pids.items():  # for stacks on a hang and deaths: failures.py
            with open(os.path.join(job_dir, f"forked{rank}"), "w") as f:
                f.write(str(pid))
        options = dict(options, sys_path=list(sys.path), cwd=os.getcwd())
        message = cloudpickle.dumps((kind, job_dir, body, options))
        start = time.perf_counter()
        try:
            for conn in self.conns:
                conn.send_bytes(message)
        except OSError:
            pass  # a rank is gone: waiting names it
        try:
            out = wait_for_ranks(self.agent, job_dir, self.world_size, timeout_s, quiet, start)
        except BaseException:  # KeyboardInterrupt ("interrupt kernel"): every rank goes
            self.shutdown()
            raise
        broken = out.exited < self.world_size  # a failure, a hang, or a clean-up that never ended
        if broken:
            self.agent.kill()  # stop every rank before reading what they left
        drain(self.agent, out.log, quiet)
        try:
            results = collect(job_dir, self.world_size, out, timeout_s)
            reasons = {
                _read(os.path.join(job_dir, f"rank{r}.done")) for r in range(self.world_size)
            }
        finally:
            if broken:
                self.dirty = "a rank failed, hung or did not finish cleaning up"
                self.shutdown()
                if not self.one_job:
                    _start_spare(self.world_size, self.backend, self.preload)
            else:
                shutil.rmtree(job_dir, ignore_errors=True)
        if any(reasons):
            self.dirty = "; ".join(sorted(r for r in reasons if r))
            if not quiet and not self.one_job:
                print(
                    f"[lab_utils] the ranks are not reused after this run ({self.dirty}); "
                    "the next run starts fresh ones",
                    flush=True,
                )
        results.pooled = not self.one_job
        return results

    def leave(self) -> int:
        """Ask the ranks to leave (barrier, destroy_process_group, exit) and wait as long as a
        clean-up may take (``jobs.TEARDOWN_GRACE_S``), then kill what is left. Returns how many
        ranks left on their own (``rank<k>.left``, written by worker.py)."""
        stop = cloudpickle.dumps(("stop", "", None, {}))
        try:
            for conn in self.conns:
                conn.send_bytes(stop)
        except OSError:
            pass
        deadline = time.perf_counter() + jobs.TEARDOWN_GRACE_S
        left = 0
        while left < self.world_size and time.perf_counter() < deadline and self.agent.running():
            time.sleep(0.01)
            left = sum(n.endswith(".left") for n in os.listdir(self.run_dir))
        left = sum(n.endswith(".left") for n in os.listdir(self.run_dir))
        self.shutdown()
        return left

    def execute(self, code: str, timeout_s: float = 120.0, quiet: bool = False) -> RunResults:
        """Run source code on every rank in its persistent session namespace (``%%ranks``)."""
        with _POOL_LOCK:
            return self.submit("exec", code, _options(self.world_size, timeout_s), timeout_s, quiet)

    def pull(self, name: str, timeout_s: float = 60.0) -> list:
        """The value of ``name`` in every rank's session namespace, indexed by rank."""
        with _POOL_LOCK:
            found = self.submit("pull", name, _options(self.world_size, timeout_s), timeout_s, True)
        missing = [r for r, (defined, _) in enumerate(found) if not defined]
        if missing:
            raise NameError(
                f"name {name!r} is not defined on rank(s) {missing} "
                "(define it in a %%ranks cell first)"
            )
        return [value for _, value in found]

    def shutdown(self) -> None:
        """Kill every rank of this pool and remove its folder."""
        global _POOL
        self.agent.kill()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if _POOL is self:
            _POOL = None


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return "a rank did not finish cleaning up"


def _options(world_size: int, timeout_s: float) -> dict:
    return {"threads": max(1, cpu_cores() // world_size), "pg_timeout_s": 0.75 * timeout_s}


def run_cold(
    world_size: int,
    backend: str,
    preload: tuple[str, ...],
    payload: bytes,
    options: dict,
    timeout_s: float,
    quiet: bool,
) -> RunResults:
    """A cold run: a pool that serves this one job and ends, so a run has one protocol and one set
    of failure semantics, pooled or not. Its process group is made with the run's timeout (gloo's
    send/recv keep the creation timeout), and its ranks leave as a torchrun job's do."""
    pool = RankPool(world_size, backend, preload, pg_timeout_s=options["pg_timeout_s"])
    try:
        results = pool.submit("call", payload, options, timeout_s, quiet)
        if pool.healthy():
            results.cleaned = pool.leave()
            results.clean_exit = results.cleaned == world_size
    finally:
        pool.shutdown()
    return results


def submit_call(
    world_size: int,
    backend: str,
    preload: tuple[str, ...],
    payload: bytes,
    options: dict,
    timeout_s: float,
    quiet: bool,
) -> RunResults | None:
    """``run()`` on the warm pool; None if another thread is using it (then run cold)."""
    if not _POOL_LOCK.acquire(blocking=False):
        return None
    try:
        return pool_for(world_size, backend, preload).submit(
            "call", payload, options, timeout_s, quiet
        )
    finally:
        _POOL_LOCK.release()


def pool_for(
    world_size: int, backend: str, preload: tuple[str, ...] = (), wait: bool = True
) -> RankPool:
    """The process's pool for this world size and backend, (re)started if needed; with
    wait=False a new pool starts in the background and its first job waits for it."""
    global _POOL
    pool = _POOL
    if pool is not None and not pool.fits(world_size, backend, preload):
        preload = (
            tuple(dict.fromkeys(pool.preload + tuple(preload)))
            if pool.key[:2] == (world_size, backend)
            else preload
        )
        pool.shutdown()
        pool = None
    if pool is None:
        pool = _POOL = _take_spare(world_size, backend, preload) or RankPool(
            world_size, backend, preload, wait
        )
    return pool


def _spare_wanted() -> bool:
    """A spare after a failure: in a Jupyter kernel, unless LAB_UTILS_SPARE says otherwise. Each
    one costs an agent start (a few CPU-seconds) that a script or a test suite would mostly
    waste."""
    setting = os.environ.get("LAB_UTILS_SPARE", "")
    if setting in ("0", "1"):
        return setting == "1"
    return "ipykernel" in sys.modules


def _start_spare(world_size: int, backend: str, preload: tuple[str, ...]) -> None:
    """After a failure killed the pool, start its successor now; ``pool_for`` adopts it."""
    global _SPARE
    if _SPARE is None and _spare_wanted():
        try:
            _SPARE = RankPool(world_size, backend, preload, wait=False)
        except Exception:  # noqa: BLE001 - the next call starts one the usual way and reports why
            pass


def _take_spare(world_size: int, backend: str, preload: tuple[str, ...]) -> RankPool | None:
    """The spare if it fits this call (size, backend, environment, preload), ready; else None."""
    global _SPARE
    spare, _SPARE = _SPARE, None
    if spare is None:
        return None
    if not spare.fits(world_size, backend, preload):
        spare.shutdown()
        return None
    spare.wait_ready()
    return spare


def current() -> RankPool | None:
    """The running pool, if any."""
    return _POOL


def shutdown() -> None:
    """End the running pool and its spare, if any."""
    global _SPARE
    spare, _SPARE = _SPARE, None
    for pool in (_POOL, spare):
        if pool is not None:
            pool.shutdown()


atexit.register(shutdown)
