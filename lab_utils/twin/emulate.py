"""``emulate(fn, world_size, cluster, *args)``: the learner's real code on the emulated cluster.

Each rank registers the "twin" backend, builds an emulated group over every rank and makes it
the DEFAULT group for the call (so ``dist.all_reduce(t)``, ``ctx.group``, DDP, DeviceMesh and
FSDP2 all go through it; sub-groups made with ``dist.new_group`` default to it too), runs
``fn(ctx, *args, **kwargs)`` under the compute charge, then restores the real default group. It
works on the warm pool or a cold launch (``lab_utils.run``'s options pass through).
``emulating(ctx, cluster)`` does the same for a block of code on ranks that are already running
(an exercise's check on the learner's function).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, Iterator

import torch.distributed as dist

from lab_utils.twin import session as _session
from lab_utils.twin.backend import BACKEND, register
from lab_utils.twin.compute import ComputeCharge
from lab_utils.twin.result import Emulation, RankRecord
from lab_utils.twin.scale import Scale
from lab_utils.twin.topology import Cluster


@contextmanager
def emulating(ctx: Any, cluster: Cluster, scale: Scale | None = None) -> Iterator[Any]:
    """On a rank that is ALREADY running (inside ``lab_utils.run``, e.g. an exercise's check):
    emulate the block on ``cluster``'s clock. Collective: every rank of ``ctx`` enters it.
    Yields the ctx whose ``group`` is the emulated world; the session's clock ends joined."""
    register()
    c10d = dist.distributed_c10d
    world = dist.new_group(ranks=list(range(ctx.world_size)), backend=BACKEND)
    s = _session.Session(ctx.rank, cluster, scale if scale is not None else Scale())
    real_default = c10d._world.default_pg
    _session.begin(s)
    c10d._world.default_pg = world
    try:
        with ComputeCharge(s):
            yield replace(ctx, group=world)
        s.clock.join()
    finally:
        c10d._world.default_pg = real_default
        _session.end()


def _on_rank(
    ctx: Any, fn: Callable, cluster: Cluster, scale: Scale, args: tuple, kwargs: dict
) -> RankRecord:
    with emulating(ctx, cluster, scale) as ectx:
        result = fn(ectx, *args, **kwargs)
        s = _session.current()
    return RankRecord(
        ctx.rank,
        result,
        [sp.as_dict() for sp in s.clock.spans],
        list(s.clock.steps),
        s.clock.now,
        list(s.unknown),
        dict(s.calls),
    )


def emulate(
    fn: Callable,
    world_size: int,
    cluster: Cluster,
    *args: Any,
    scale: Scale | None = None,
    **kwargs: Any,
) -> Emulation:
    """Run ``fn(ctx, *args, **kwargs)`` on ``world_size`` gloo ranks with ``cluster``'s clock.

    ``scale`` charges a full-size model's FLOPs and bytes (``Scale.model``). Options of
    ``lab_utils.run`` (cold, timeout_s, preload, quiet, ...) pass through ``kwargs`` when they
    are its keywords. Returns an ``Emulation``: ``.results[r]`` is what rank r returned.
    """
    from lab_utils.runtime.launch import run

    if not isinstance(cluster, Cluster):
        raise ValueError(
            f"cluster must be a twin.Cluster (e.g. Cluster.preset('DGX H100', "
            f"nodes=2)), got {type(cluster).__name__}"
        )
    cluster.check_world(world_size)
    scale = scale if scale is not None else Scale()
    run_keys = ("backend", "timeout_s", "pg_timeout_s", "quiet", "threads", "preload", "cold")
    run_opts = {k: kwargs.pop(k) for k in run_keys if k in kwargs}
    if run_opts.get("backend", "gloo") != "gloo":
        raise ValueError("backend: the emulated cluster runs on gloo ranks (CPU); drop it")
    run_opts["backend"] = "gloo"
    records = run(_on_rank, world_size, fn, cluster, scale, args, kwargs, **run_opts)
    return Emulation(cluster, scale, list(records))
