"""Collectives from send/recv: the ring all-reduce and the parameter server it replaced (lab 03).

Notation: N ranks in the group, D bytes in the tensor, chunk = D/N. Rank r sends to its right
neighbour (r+1) % N and receives from its left neighbour (r-1) % N, so every link of the ring
carries one chunk per step in each step, all links at once.

    ring_reduce_scatter  N-1 steps; rank r ends holding the full sum of chunk r;
                         sends (N-1)/N * D bytes per rank
    ring_all_gather      N-1 steps; every rank ends with every chunk;  (N-1)/N * D per rank
    ring_all_reduce      both: 2(N-1) steps, 2(N-1)/N * D bytes per rank (Patarasuk & Yuan
                         2009): the bandwidth term does not grow with N, the latency term
                         (2(N-1) messages in sequence) grows LINEARLY with N.
    parameter_server_all_reduce  every worker sends D to rank 0, which sums and sends D back:
                         rank 0 sends (N-1) * D, a bottleneck that grows with N.

Each step posts the send and the receive together (isend + irecv, then wait for both): with
blocking send/recv every rank would wait in send for a neighbour that is itself sending.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch
import torch.distributed as dist


def _ring(group: Any) -> tuple[int, int, int, int]:
    """(n, rank in group, global rank of right neighbour, global rank of left neighbour)."""
    n, r = dist.get_world_size(group), dist.get_rank(group)
    right = dist.get_global_rank(group, (r + 1) % n) if group is not None else (r + 1) % n
    left = dist.get_global_rank(group, (r - 1) % n) if group is not None else (r - 1) % n
    return n, r, right, left


def _exchange(send: torch.Tensor, recv: torch.Tensor, right: int, left: int, group: Any) -> None:
    """Send ``send`` right while receiving ``recv`` from the left; wait for both."""
    reqs = [dist.isend(send, right, group=group), dist.irecv(recv, left, group=group)]
    for req in reqs:
        req.wait()


def _chunks(tensor: torch.Tensor, n: int) -> list[torch.Tensor]:
    if not tensor.is_contiguous():
        raise ValueError("ring collectives work in place on a contiguous tensor")
    return list(tensor.view(-1).tensor_split(n))  # views; sizes differ by at most 1 element


def ring_reduce_scatter(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Sum chunk r of ``tensor`` over the ring into rank r's copy; return that chunk (a view).

    N-1 steps; at step s rank r sends chunk (r-s-1) % N (its running partial sum) right and
    receives chunk (r-s-2) % N from the left, adding it to its own values. Other chunks are
    left holding partial sums. Bytes sent per rank: (N-1) chunks = (N-1)/N * D.
    """
    n, r, right, left = _ring(group)
    chunks = _chunks(tensor, n)
    if n == 1:
        return chunks[0]
    scratch = torch.empty_like(chunks[0])  # chunk 0 is the largest
    for s in range(n - 1):
        send_i, recv_i = (r - s - 1) % n, (r - s - 2) % n
        incoming = scratch[: chunks[recv_i].numel()]
        _exchange(chunks[send_i], incoming, right, left, group)
        chunks[recv_i].add_(incoming)  # after step N-2 this is chunk r: the full sum
    return chunks[r]


def ring_all_gather(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Given the finished chunk r on each rank r, fill every chunk of ``tensor`` in place.

    N-1 steps; at step s rank r forwards chunk (r-s) % N right and receives chunk
    (r-s-1) % N straight into place. Bytes sent per rank: (N-1)/N * D.
    """
    n, r, right, left = _ring(group)
    chunks = _chunks(tensor, n)
    for s in range(n - 1):
        send_i, recv_i = (r - s) % n, (r - s - 1) % n
        _exchange(chunks[send_i], chunks[recv_i], right, left, group)
    return tensor


def ring_all_reduce(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Sum ``tensor`` over all ranks of ``group``, in place, with only isend/irecv.

    Reduce-scatter phase (N-1 steps) then all-gather phase (N-1 steps), one chunk of D/N per
    step: 2(N-1) messages and 2(N-1)/N * D bytes sent per rank, the same as gloo's / NCCL's
    ring. Returns ``tensor``.
    """
    ring_reduce_scatter(tensor, group)  # rank r now holds the full sum of chunk r
    return ring_all_gather(tensor, group)  # pass the finished chunks around the ring


def parameter_server_all_reduce(tensor: torch.Tensor, group: Any = None,
                                server: int = 0) -> torch.Tensor:
    """The pre-ring design: workers send D to a server rank, which sums and sends D back.

    Server: receives (N-1) * D and sends (N-1) * D; each worker sends and receives D. The
    server's link carries N-1 times what a ring link does, so time grows with N. In place.
    """
    n, r = dist.get_world_size(group), dist.get_rank(group)
    server_g = dist.get_global_rank(group, server) if group is not None else server
    if r != server:
        dist.send(tensor, server_g, group=group)
        dist.recv(tensor, server_g, group=group)
        return tensor
    incoming = torch.empty_like(tensor)
    for worker in range(n):
        if worker != server:
            src = dist.get_global_rank(group, worker) if group is not None else worker
            dist.recv(incoming, src, group=group)
            tensor.add_(incoming)
    reqs = [dist.isend(tensor, dist.get_global_rank(group, w) if group is not None else w,
                       group=group) for w in range(n) if w != server]
    for req in reqs:
        req.wait()
    return tensor


IMPLEMENTATIONS: dict[str, Callable] = {
    "gloo": lambda t, g=None: dist.all_reduce(t, group=g),
    "ring": ring_all_reduce,
    "parameter_server": parameter_server_all_reduce,
}


def time_all_reduce(ctx: Any, sizes_bytes: list[int], impls: tuple[str, ...] = ("gloo", "ring"),
                    repeats: int = 5, warmup: int = 1, group: Any = None) -> dict[str, list[float]]:
    """Median seconds of one all-reduce per (implementation, size), max over the group's ranks.

    Each repetition starts after a barrier and lasts as long as its slowest rank (the
    collective is done when the last rank is); we report the median of ``repeats``.
    Communication: the timed all-reduces plus one all-reduce(MAX) of one float64 per repetition.
    Call it on every rank of ``group`` (default: ctx.group).
    """
    group = group if group is not None else ctx.group
    out: dict[str, list[float]] = {name: [] for name in impls}
    for name in impls:
        fn = IMPLEMENTATIONS[name]
        for size in sizes_bytes:
            x = torch.ones(max(1, size // 4), dtype=torch.float32, device=ctx.device)
            times = []
            for i in range(warmup + repeats):
                dist.barrier(group=group)
                t0 = time.perf_counter()
                fn(x, group)
                elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
                if i >= warmup:
                    times.append(elapsed.item())
            out[name].append(statistics.median(times))
    return out


def all_reduce_sweep(ctx: Any, sizes_bytes: list[int], group_sizes: list[int],
                     impls: tuple[str, ...] = ("gloo", "ring", "parameter_server"),
                     repeats: int = 5) -> dict[int, dict]:
    """Lab 03's experiment in one launch: for each n in ``group_sizes``, ranks 0..n-1 form a
    group; they count, with a CommLedger, the messages and bytes one all-reduce of
    sizes_bytes[-1] makes this rank send (per implementation, and per phase of the ring),
    then time every implementation at every size. Ranks outside the group wait at a barrier.
    Returns {n: {"sends", "bytes", "phases", "times"}} on the group's ranks ({} elsewhere);
    "times" as time_all_reduce.
    """
    from lab_utils.measure import CommLedger  # measure imports calc only; no cycle

    out: dict[int, dict] = {}
    for n in group_sizes:
        group = dist.new_group(list(range(n)))  # collective: every rank takes part
        if ctx.rank < n:
            sends, sent = {}, {}
            for name in impls:
                x = torch.ones(sizes_bytes[-1] // 4, dtype=torch.float32, device=ctx.device)
                with CommLedger() as ledger:
                    IMPLEMENTATIONS[name](x, group)
                sends[name] = ledger.count("send")
                sent[name] = ledger.bytes_sent()
            x = torch.ones(sizes_bytes[-1] // 4, dtype=torch.float32, device=ctx.device)
            with CommLedger() as ledger:
                with ledger.phase("reduce_scatter"):
                    ring_reduce_scatter(x, group)
                with ledger.phase("all_gather"):
                    ring_all_gather(x, group)
            phases = {ph: ledger.bytes_sent(phase=ph) for ph in ("reduce_scatter", "all_gather")}
            times = time_all_reduce(ctx, sizes_bytes, impls, repeats, group=group)
            out[n] = {"sends": sends, "bytes": sent, "phases": phases, "times": times}
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
    mine = start()[r * per_rank:(r + 1) * per_rank].contiguous()  # rank r owns chunk r
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
