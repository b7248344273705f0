"""Launch a function on N real ranks and get each rank's return value back (lab 00).

    results = run(fn, 4, tensor_size=8)     # fn(ctx, tensor_size=8) on ranks 0..3
    results[2]                              # what rank 2 returned

How it works: ``fn`` and its arguments are pickled with cloudpickle (so a function defined in
a notebook cell travels by value), then ``torchrun`` - the same launcher used on clusters -
starts the ranks, forked from torchrun's agent (``--run-path --start-method fork``), which has
already imported torch, so N ranks start about as fast as one ``import torch``; and the agent is
itself forked from the launcher's zygote (``engine/zygote.py``), so usually not even that. Each
rank runs ``lab_utils/runtime/worker.py``, which writes its return value or traceback to a folder.

Warm ranks (``engine/pool.py``): by default the ranks OUTLIVE one call. The first ``run`` starts
a pool of ranks; later calls with the same world size, backend and distributed environment
variables reuse it (milliseconds instead of seconds). ``run(..., cold=True)`` or
``LAB_UTILS_POOL=0`` forces a fresh torchrun launch: a pool that serves this one job and ends.
Either way a run starts from the same state: a usable process group, torch / random / NumPy
seeded with ``RUN_SEED`` on every rank.

Failure handling, the same pooled or not (one protocol: ``engine/jobs.py``):
  * a rank raises -> the others are stopped, and one RankFailure names the rank and shows its
    original traceback (a pool is torn down, and rebuilt by the next call);
  * a rank is stuck in a collective -> it raises the process group's timeout (set short), or
    the deadline ends the run; RankTimeout names the ranks and shows where they waited;
  * a rank dies silently (os._exit, a signal, the OOM killer) -> it is named, not its victims;
  * Ctrl-C / "interrupt kernel" -> every rank is killed (they share one process group); and
    when the launching process dies, however it dies, every rank dies too (``engine/lifeline.py``).
"""

from __future__ import annotations

import os
from typing import Any, Callable

import cloudpickle

from lab_utils.runtime.engine import pool
from lab_utils.runtime.engine.jobs import TEARDOWN_GRACE_S
from lab_utils.runtime.engine.paths import cpu_cores
from lab_utils.runtime.results import RankFailure, RankTimeout, RunResults  # noqa: F401


def oversubscription_note(world_size: int, backend: str) -> str | None:
    """The honest-timing warning: more CPU ranks than cores means ranks take turns."""
    cores = cpu_cores()
    if backend == "gloo" and world_size > cores:
        return (
            f"note: {world_size} ranks share {cores} CPU cores, so ranks take turns on the "
            "cores: wall-clock timings measure this machine, not the parallel schedule."
        )
    return None


# ------------------------------------------------------------------------------- inputs
def validate(fn: Callable, world_size: Any, timeout_s: float, preload: tuple[str, ...]) -> None:
    import importlib.util

    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(
            f"world_size must be an int (number of ranks), got {world_size!r} "
            f"of type {type(world_size).__name__}"
        )
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not callable(fn):
        raise TypeError(f"fn must be a function taking (ctx, ...), got {fn!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
    for name in preload:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ValueError(
                f"preload: no module named {name!r} (give importable module names, "
                "e.g. 'torch.distributed.pipelining')"
            )


def pickle_payload(obj: Any, what: str) -> bytes:
    try:
        return cloudpickle.dumps(obj)
    except Exception as exc:
        raise TypeError(
            f"could not send {what!r} and its arguments to the ranks: "
            f"{type(exc).__name__}: {exc}. Everything a rank needs is pickled; objects such as "
            "open files, locks, generators or process groups cannot be. Create them inside "
            "the function instead, and pass plain values (numbers, strings, tensors)."
        ) from None


def resolve_backend(backend: str, world_size: int) -> str:
    from lab_utils.runtime.context import resolve_backend as resolve  # deferred: imports torch

    return resolve(backend, world_size)  # one node: local world size = world size


# -------------------------------------------------------------------------------- run
def pool_enabled() -> bool:
    return os.environ.get("LAB_UTILS_POOL", "1") != "0"


def run(
    fn: Callable,
    world_size: int,
    *args: Any,
    backend: str = "auto",
    timeout_s: float = 120.0,
    pg_timeout_s: float | None = None,
    quiet: bool = False,
    threads: int | None = None,
    preload: tuple[str, ...] = (),
    cold: bool = False,
    **kwargs: Any,
) -> RunResults:
    """Run ``fn(ctx, *args, **kwargs)`` on ``world_size`` ranks; return each rank's result.

    backend:       "auto" (NCCL with one GPU per rank if there are enough GPUs, else gloo
                   on CPU), "gloo" or "nccl".
    timeout_s:     deadline for the whole run; ranks still running then are named and killed.
    pg_timeout_s:  process-group timeout inside the ranks (default: 3/4 of timeout_s), so a
                   rank stuck in a collective raises - with a traceback showing where -
                   before the deadline.
    quiet:         do not echo the ranks' output live (it is still in ``results.log``).
    threads:       intra-op threads per rank (default: cores // ranks, at least 1).
    preload:       modules to import before the ranks are forked, e.g.
                   ("torch.distributed.pipelining",): paid once instead of once per rank.
    cold:          a fresh torchrun launch instead of the warm pool (see pool.py).

    Raises RankFailure (a rank raised) or RankTimeout (ranks did not finish).
    """
    preload = tuple(preload)
    validate(fn, world_size, timeout_s, preload)
    backend = resolve_backend(backend, world_size)
    options = {
        "backend": backend,
        "threads": threads or max(1, cpu_cores() // world_size),
        "pg_timeout_s": pg_timeout_s if pg_timeout_s is not None else 0.75 * timeout_s,
    }
    payload = pickle_payload((fn, args, kwargs, options), getattr(fn, "__name__", fn))
    note = oversubscription_note(world_size, backend)
    if note and not quiet:
        print(f"[lab_utils] {note}", flush=True)
    results = None
    if not cold and pool_enabled():
        results = pool.submit_call(world_size, backend, preload, payload, options, timeout_s, quiet)
    if results is None:  # cold by request, or the pool is busy with another thread's run
        results = pool.run_cold(world_size, backend, preload, payload, options, timeout_s, quiet)
    results.backend = backend
    results.oversubscribed = note is not None
    if not results.clean_exit and not quiet:
        print(
            f"[lab_utils] warning: {world_size - results.cleaned} rank(s) did not finish "
            f"cleaning up within {TEARDOWN_GRACE_S:g} s and were stopped (results are complete)",
            flush=True,
        )
    return results


def ranks(
    world_size: int, backend: str = "auto", preload: tuple[str, ...] = (), wait: bool = True
) -> pool.RankPool:
    """Start (or get) the warm pool of ``world_size`` ranks; ``.shutdown()`` ends it.
    wait=False returns at once: the ranks come up in the background while the notebook goes
    on, and the first run() on them waits for whatever is left of the start."""
    return pool.pool_for(world_size, resolve_backend(backend, world_size), tuple(preload), wait)
