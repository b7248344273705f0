"""Lab 03 on the emulated cluster (section 4b): the same timed all-reduces on a GPU cluster's clock.

``collectives.time_all_reduce``, the function that times gloo's and our ring's all-reduce on this
machine, runs unchanged under ``twin.emulate``: the data still moves through gloo (every sum is
exact), the time is the emulated cluster's. gloo's ``dist.all_reduce`` is charged by
``calc.comm.group_collective_time``; our ring is built of sends and receives, so each of its
2(n-1) messages is charged on the link it crosses, and its time comes out of its own steps.

    timed_sweep(ctx, sizes, group_sizes)   time_all_reduce on groups of the first n ranks, for
                                           each n; one repetition (the clock is deterministic)
    hierarchy_times(ctx, gpus_per_node, numel)   one flat ring, the hierarchical all-reduce (both
                                           from sends) and dist.all_reduce, on nodes of g ranks
    node_cluster(n) / nodes_cluster(m, g)  one DGX H100 node of n GPUs; m nodes of g GPUs
    charged_as(real_bytes, charged_bytes)  a Scale that charges a message as a bigger one
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from lab_utils import twin
from lab_utils.experiments.lab03.collectives import time_all_reduce
from lab_utils.parallel import collectives as C

PRESET = "DGX H100"  # NVLink4 inside a node, one InfiniBand NDR NIC per GPU between nodes


def node_cluster(n: int, preset: str = PRESET) -> twin.Cluster:
    """One node of ``preset`` with ``n`` GPUs: every group is inside it (NVLink)."""
    return twin.Cluster.preset(preset, nodes=1, gpus_per_node=n)


def nodes_cluster(nodes: int, gpus_per_node: int, preset: str = PRESET) -> twin.Cluster:
    """``nodes`` nodes of ``preset``, ``gpus_per_node`` GPUs used on each."""
    return twin.Cluster.preset(preset, nodes=nodes, gpus_per_node=gpus_per_node)


def charged_as(real_bytes: float, charged_bytes: float) -> twin.Scale:
    """Charge every message ``charged_bytes / real_bytes`` times its size (the math runs on the
    small buffer; the clock sees the big one)."""
    return twin.Scale(
        bytes=charged_bytes / real_bytes,
        name=f"a {real_bytes:,.0f}-byte buffer charged as {charged_bytes:.3g} bytes",
    )


def timed_sweep(
    ctx: Any,
    sizes_bytes: list[int],
    group_sizes: list[int],
    impls: tuple[str, ...] = ("gloo", "ring"),
) -> dict[int, dict] | None:
    """For each n in ``group_sizes`` the first n ranks form a group and time every
    implementation at every size (``time_all_reduce``, one repetition, no warm-up); the other
    ranks wait at a barrier. Rank 0 returns {n: {impl: [seconds per size]}}."""
    out: dict[int, dict] = {}
    for n in group_sizes:
        group = dist.new_group(list(range(n)))  # collective: every rank takes part
        if ctx.rank < n:
            out[n] = time_all_reduce(ctx, sizes_bytes, impls, repeats=1, warmup=0, group=group)
        dist.barrier()
    return out if ctx.rank == 0 else None


def hierarchy_times(ctx: Any, gpus_per_node: int, numel: int) -> dict[str, float] | None:
    """One all-reduce of ``numel`` floats over every rank, three ways: one flat ring and the
    hierarchical all-reduce (reduce-scatter in the node, ring across nodes, all-gather in the
    node), both built of sends, and ``dist.all_reduce``. Rank 0 returns {way: seconds}."""
    intra, inter = C.node_groups(gpus_per_node)
    ways = {
        "one flat ring (sends)": C.ring_all_reduce,
        "hierarchical (sends)": lambda t, g: C.hierarchical_all_reduce(t, intra, inter),
        "dist.all_reduce": C.IMPLEMENTATIONS["gloo"],
    }
    times = time_all_reduce(ctx, [4 * numel], ways, repeats=1, warmup=0)
    return {way: t[0] for way, t in times.items()} if ctx.rank == 0 else None
