"""Lab 03's collectives on this machine: every collective's before/after, the ring's bytes per
phase, timings (on the clock the rank runs on: wall here, emulated under ``twin.emulate``).

    collective_before_after(ctx)           what each rank holds before and after each collective
    all_reduce_sweep(ctx, sizes, groups)   messages, bytes and times of gloo / ring / parameter
                                           server all-reduce, for several group sizes, one launch
    time_all_reduce(ctx, sizes)            median time of one all-reduce per implementation and size
                                           (implementations by name, or a {name: fn} dict)
    ring_trace(ctx)                        which ranks' contributions each chunk holds, step by step
    wire_per_collective(ctx)               every collective: bytes sent by formula, ledger and wire
    who_sends_to_whom(ctx)                 rank x rank matrix of wire bytes, ring vs gloo all-reduce
    hierarchical_bytes(ctx, g)             bytes per rank of each phase of the hierarchical
                                           all-reduce (nodes of g ranks) and of the flat ring
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from lab_utils.experiments.common import clock_now
from lab_utils.parallel import collectives as C
from lab_utils.parallel.collectives import IMPLEMENTATIONS, ring_all_gather, ring_reduce_scatter


def time_all_reduce(
    ctx: Any,
    sizes_bytes: list[int],
    impls: tuple[str, ...] | dict[str, Callable] = ("gloo", "ring"),
    repeats: int = 5,
    warmup: int = 1,
    group: Any = None,
) -> dict[str, list[float]]:
    """Median seconds of one all-reduce per (implementation, size), max over the group's ranks.

    ``impls``: names of ``IMPLEMENTATIONS`` or a {name: fn(tensor, group)} dict. Each repetition
    starts after a barrier and lasts as long as its slowest rank (the collective is done when
    the last rank is); we report the median of ``repeats``. Seconds of ``clock_now``: this
    machine's wall clock, or the emulated cluster's under ``twin.emulate`` (deterministic: one
    repetition and no warm-up say it all there).
    Communication: the timed all-reduces plus one all-reduce(MAX) of one float64 per repetition.
    Call it on every rank of ``group`` (default: ctx.group).
    """
    group = group if group is not None else ctx.group
    fns = impls if isinstance(impls, dict) else {name: IMPLEMENTATIONS[name] for name in impls}
    out: dict[str, list[float]] = {name: [] for name in fns}
    for name, fn in fns.items():
        for size in sizes_bytes:
            x = torch.ones(max(1, size // 4), dtype=torch.float32, device=ctx.device)
            times = []
            for i in range(warmup + repeats):
                dist.barrier(group=group)
                t0 = clock_now()
                fn(x, group)
                elapsed = torch.tensor([clock_now() - t0], dtype=torch.float64)
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
                if i >= warmup:
                    times.append(elapsed.item())
            out[name].append(statistics.median(times))
    return out


def all_reduce_sweep(
    ctx: Any,
    sizes_bytes: list[int],
    group_sizes: list[int],
    impls: tuple[str, ...] = ("gloo", "ring", "parameter_server"),
    repeats: int = 5,
) -> dict[int, dict]:
    """Lab 03's experiment in one launch: for each n in ``group_sizes``, ranks 0..n-1 form a
    group; they count, with a CommLedger, the messages and bytes one all-reduce of
    sizes_bytes[-1] makes this rank send (per implementation, and per phase of the ring), and
    with a WireMeter the bytes the kernel saw leave this rank; then they time every
    implementation at every size. Ranks outside the group wait at a barrier.
    Returns {n: {"sends", "bytes", "wire", "phases", "times"}} on the group's ranks ({}
    elsewhere): "bytes" = ledger, "wire" = WireMeter's sent (None where it cannot measure),
    "times" as time_all_reduce.
    """
    from lab_utils.measure import CommLedger, WireMeter  # measure imports calc only; no cycle

    out: dict[int, dict] = {}
    for n in group_sizes:
        group = dist.new_group(list(range(n)))  # collective: every rank takes part
        if ctx.rank < n:
            sends, sent, wire_sent = {}, {}, {}
            for name in impls:
                x = torch.ones(sizes_bytes[-1] // 4, dtype=torch.float32, device=ctx.device)
                dist.barrier(group=group)  # no other rank's traffic inside the block
                with CommLedger() as ledger, WireMeter(ctx) as wire:
                    IMPLEMENTATIONS[name](x, group)
                sends[name] = ledger.count("send")
                sent[name] = ledger.bytes_sent()
                wire_sent[name] = wire.sent
            x = torch.ones(sizes_bytes[-1] // 4, dtype=torch.float32, device=ctx.device)
            with CommLedger() as ledger:
                with ledger.phase("reduce_scatter"):
                    ring_reduce_scatter(x, group)
                with ledger.phase("all_gather"):
                    ring_all_gather(x, group)
            phases = {ph: ledger.bytes_sent(phase=ph) for ph in ("reduce_scatter", "all_gather")}
            times = time_all_reduce(ctx, sizes_bytes, impls, repeats, group=group)
            out[n] = {
                "sends": sends,
                "bytes": sent,
                "wire": wire_sent,
                "phases": phases,
                "times": times,
            }
        dist.barrier(group=ctx.group)
    return out


def collective_before_after(ctx: Any, n_elems: int | None = None) -> dict[str, dict]:
    """What this rank holds before and after each collective (lab 03's picture).

    Rank r starts with [10r, 10r+1, ...] (n_elems = N by default: one element per chunk).
    Returns {op: {"before": list, "after": list | None}}. all_to_all sends chunk j to rank j;
    after reduce only the destination (rank 0) holds a defined result, so others get None.
    """
    n, r = ctx.world_size, ctx.rank
    n_elems = n_elems or n
    per_rank = n_elems // n

    def start() -> torch.Tensor:
        return torch.arange(n_elems, dtype=torch.float32) + 10 * r  # (n_elems,)

    out: dict[str, dict] = {}
    x = start()
    dist.all_reduce(x, group=ctx.group)  # every rank: the sum
    out["all_reduce"] = {"before": start().tolist(), "after": x.tolist()}
    shard = torch.empty(per_rank)
    dist.reduce_scatter_tensor(shard, start(), group=ctx.group)  # rank r: sum of chunk r
    out["reduce_scatter"] = {"before": start().tolist(), "after": shard.tolist()}
    mine = start()[r * per_rank : (r + 1) * per_rank].contiguous()  # rank r owns chunk r
    full = torch.empty(n_elems)
    dist.all_gather_into_tensor(full, mine, group=ctx.group)  # every rank: all chunks
    out["all_gather"] = {"before": mine.tolist(), "after": full.tolist()}
    x = start()
    dist.broadcast(x, src=0, group=ctx.group)  # every rank: rank 0's tensor
    out["broadcast"] = {"before": start().tolist(), "after": x.tolist()}
    x = start()
    dist.reduce(x, dst=0, group=ctx.group)  # rank 0: the sum; others: undefined
    out["reduce"] = {"before": start().tolist(), "after": x.tolist() if r == 0 else None}
    y = torch.empty(n_elems)
    dist.all_to_all_single(y, start(), group=ctx.group)  # chunk j of rank i -> rank j
    out["all_to_all"] = {"before": start().tolist(), "after": y.tolist()}
    return out


# --- What the wire really carries (formula | ledger | wire; who sends to whom) ---------------

WIRE_NUMEL = 786_432  # 3 MB of float32: divisible by 2, 3, 4, 6, 8; gloo's headers are < 0.1%


@dataclass
class WireSample:
    """One collective as this rank saw it: the bytes it sent, three ways (measure/wire.py)."""

    op: str  # "all_reduce", "reduce_scatter_single", "reduce_scatter (list)", ...
    formula: float  # the ring formula for this rank (calc.ring_bytes_per_rank)
    ledger: float  # CommLedger: the ring formula applied to the calls it saw
    wire: int | None  # WireMeter: what the kernel counted leaving this rank's sockets
    sent_to: dict[int, int]  # wire bytes per peer rank


def wire_per_collective(ctx: Any, numel: int = WIRE_NUMEL) -> list[WireSample]:
    """Every collective once on a float32 tensor of ``numel`` (D = 4 numel bytes), each inside
    a CommLedger and a WireMeter, after a barrier (so no other op's bytes fall in its block).
    send/recv: rank 0 sends D to rank 1. all_gather: D from every rank (the formula's buffer
    is the N x D output). Call it on every rank; numel must divide by the world size.
    """
    from lab_utils.calc import ring_bytes_per_rank
    from lab_utils.measure import CommLedger, WireMeter

    n, r, g, d = ctx.world_size, ctx.rank, ctx.group, 4 * numel
    x = torch.ones(numel, device=ctx.device)
    shard = torch.empty(numel // n, device=ctx.device)

    def send_recv() -> None:
        if r == 0:
            dist.send(x, 1, group=g)
        elif r == 1:
            dist.recv(x, 0, group=g)

    def ring(op: str, size: int = d) -> float:
        return ring_bytes_per_rank(op, n, size)

    calls = {  # op -> (the call, ring-formula bytes this rank sends)
        "all_reduce": (lambda: dist.all_reduce(x, group=g), ring("all_reduce")),
        "reduce_scatter_single": (
            lambda: dist.reduce_scatter_single(shard, x, group=g),
            ring("reduce_scatter"),
        ),
        "reduce_scatter (list)": (
            lambda: dist.reduce_scatter(shard, list(x.chunk(n)), group=g),
            ring("reduce_scatter"),
        ),
        "all_gather_single": (
            lambda: dist.all_gather_single(torch.empty(n * numel, device=ctx.device), x, group=g),
            ring("all_gather", n * d),
        ),
        "all_gather (list)": (
            lambda: dist.all_gather([torch.empty_like(x) for _ in range(n)], x, group=g),
            ring("all_gather", n * d),
        ),
        "broadcast": (lambda: dist.broadcast(x, src=0, group=g), ring("broadcast")),
        "reduce": (lambda: dist.reduce(x, dst=0, group=g), ring("reduce")),
        "all_to_all": (
            lambda: dist.all_to_all_single(torch.empty_like(x), x, group=g),
            ring("all_to_all"),
        ),
        "send/recv": (send_recv, float(d) if r == 0 else 0.0),
        "barrier": (lambda: dist.barrier(group=g), 0.0),
    }
    out = []
    for op, (call, formula) in calls.items():
        dist.barrier(group=g)
        with CommLedger() as ledger, WireMeter(ctx) as wire:
            call()
        out.append(WireSample(op, formula, ledger.bytes_sent(), wire.sent, wire.sent_to))
    return out


@dataclass
class SendMatrix:
    """Who sends to whom during one all-reduce: matrix[i][j] = wire bytes rank i sent rank j."""

    impl: str  # "ring" (ours, from send/recv) or "gloo" (dist.all_reduce)
    tensor_bytes: int  # D
    matrix: list[list[int]]


def who_sends_to_whom(
    ctx: Any, numel: int = WIRE_NUMEL, impls: tuple[str, ...] = ("ring", "gloo")
) -> list[SendMatrix] | None:
    """One all-reduce of ``numel`` float32 per implementation, each inside a WireMeter; the
    rank x rank matrix of measured bytes, gathered on rank 0 (None on the other ranks).
    Communication besides the all-reduces: a barrier and a gather_object per implementation.
    """
    from lab_utils.measure import WireMeter, wire_matrix

    out = []
    for name in impls:
        x = torch.ones(numel, device=ctx.device)
        dist.barrier(group=ctx.group)
        with WireMeter(ctx) as wire:
            IMPLEMENTATIONS[name](x, ctx.group)
        matrix = wire_matrix(wire, ctx.group)  # collective
        out.append(SendMatrix(name, 4 * numel, matrix))
    return out if ctx.rank == 0 else None


# --- The ring, step by step (the diagram of section 2) --------------------------------------


@dataclass
class RingTrace:
    """Which ranks' contributions every chunk holds, on every rank, after every ring step.

    steps[k] = (label, sent, held): ``label`` e.g. "RS step 0"; ``sent[r]`` = the chunk rank r
    sent to its right neighbour in that step (None for the start); ``held[r][c]`` = the sorted
    ranks whose values chunk c of rank r holds summed.
    """

    n: int
    steps: list[tuple[str, list[int | None], list[list[list[int]]]]]


def _contributors(chunk: torch.Tensor) -> list[int]:
    """Rank r starts with 2**r in every element, so a chunk's value is the bitmask of the ranks
    summed into it (sums of distinct powers of two are exact in float32 for n <= 24)."""
    mask = int(chunk[0].item())
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


def ring_trace(ctx: Any, elems_per_chunk: int = 2) -> RingTrace | None:
    """Run the ring all-reduce of ``parallel.collectives`` step by step on the whole group and
    record, after each step, which contributions every chunk of every rank holds.

    The schedule is ring_reduce_scatter's and ring_all_gather's (same chunk indices, same
    exchange of one chunk per step); only a snapshot is added between steps, and the final
    tensor is checked against ring_all_reduce's. Gathered on rank 0 (None elsewhere).
    Communication: 2(n-1) steps of one chunk each, plus a gather_object per snapshot.
    """
    from lab_utils.parallel.collectives import (
        exchange,
        ring_all_reduce,
        ring_chunks,
        ring_neighbours,
    )

    group = ctx.group
    n, r, right, left = ring_neighbours(group)
    x = torch.full((n * elems_per_chunk,), float(2**r))  # (n * e,): n chunks of e elements
    chunks = ring_chunks(x, n)
    steps: list[tuple[str, list, list]] = []

    def snapshot(label: str, sent: int | None) -> None:
        mine = ([_contributors(c) for c in chunks], sent)
        every: list[Any] = [None] * n if r == 0 else None
        dist.gather_object(mine, every, group=group, dst=dist.get_global_rank(group, 0))
        if r == 0:
            steps.append((label, [e[1] for e in every], [e[0] for e in every]))

    snapshot("start", None)
    scratch = torch.empty_like(chunks[0])
    for s in range(n - 1):  # reduce-scatter: send my running partial sum, add the incoming one
        send_i, recv_i = (r - s - 1) % n, (r - s - 2) % n
        exchange(chunks[send_i], scratch, right, left, group)
        chunks[recv_i].add_(scratch)
        snapshot(f"RS step {s}", send_i)
    for s in range(n - 1):  # all-gather: forward a finished chunk, store the incoming one
        send_i, recv_i = (r - s) % n, (r - s - 1) % n
        exchange(chunks[send_i], chunks[recv_i], right, left, group)
        snapshot(f"AG step {s}", send_i)
    y = torch.full_like(x, float(2**r))
    ring_all_reduce(y, group)
    if not torch.equal(x, y):
        raise AssertionError("the traced schedule differs from ring_all_reduce's result")
    return RingTrace(n, steps) if r == 0 else None


def hierarchical_bytes(ctx: Any, gpus_per_node: int, numel: int = 4096) -> dict[str, Any]:
    """Bytes this rank sends in each phase of ``hierarchical_all_reduce`` (ranks grouped in
    "nodes" of ``gpus_per_node``), and in a flat ring over every rank; both checked against
    dist.all_reduce. On one machine every link is loopback: the NODES are a labelling."""
    from lab_utils.measure import CommLedger

    intra, inter = C.node_groups(gpus_per_node)
    x = torch.randn(numel, generator=torch.Generator().manual_seed(ctx.rank))
    want = x.clone()
    dist.all_reduce(want)
    out: dict[str, Any] = {}
    hier, flat = x.clone(), x.clone()
    with CommLedger() as led:
        chunk = C.ring_reduce_scatter(hier, intra)
    out["intra-node reduce-scatter"] = led.bytes_sent()
    with CommLedger() as led:
        C.ring_all_reduce(chunk, inter)
    out["inter-node all-reduce"] = led.bytes_sent()
    with CommLedger() as led:
        C.ring_all_gather(hier, intra)
    out["intra-node all-gather"] = led.bytes_sent()
    with CommLedger() as led:
        C.ring_all_reduce(flat)
    out["flat ring"] = led.bytes_sent()
    out["correct"] = torch.allclose(hier, want, atol=1e-5) and torch.allclose(flat, want, atol=1e-5)
    return out
