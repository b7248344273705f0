"""Exercise (lab 03): ring all-reduce from send/recv.

The learner writes ``fn(tensor, group)`` that sums ``tensor`` over the ranks of ``group`` in
place using only point-to-point calls (dist.isend / dist.irecv / send / recv). The check runs
it on 4 ranks, compares with gloo's all_reduce and, with a CommLedger, requires the ring's
traffic: 2(N-1) sends of D/N bytes, i.e. 2(N-1)/N * D bytes per rank, and no collective.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from lab_utils.calc.comm import ring_bytes_per_rank
from lab_utils.parallel.collectives import (_chunks, _exchange, _ring, ring_all_gather, ring_all_reduce,
                                  ring_reduce_scatter)
from lab_utils.exercises._core import Exercise, Verdict, compare_tensors, register
from lab_utils.measure import CommLedger

SIZES = (1024, 10)  # 1024 floats: N divides it, so bytes must match the formula exactly;
                    # 10 floats on 4 ranks: uneven chunks (3, 3, 2, 2)


def check(ctx, fn) -> Verdict:
    n = ctx.world_size
    for numel in SIZES:
        g = torch.Generator().manual_seed(1000 * ctx.rank + numel)
        x = torch.randn(numel, generator=g)  # (numel,) different on every rank
        expected = x.clone()
        dist.all_reduce(expected, group=ctx.group)
        got = x.clone()
        with CommLedger() as ledger:
            out = fn(got, ctx.group)
        other = sorted({r.op for r in ledger.records} - {"send", "recv"})
        if other:
            return Verdict.fail(f"your function called {', '.join(other)}: build the ring from "
                                "send/recv (isend/irecv) only", ops=other)
        result = out if isinstance(out, torch.Tensor) else got
        problem = compare_tensors(result, expected, what=f"sum of {numel} floats",
                                  rtol=1e-5, atol=1e-5, unchanged=x)
        if problem:
            return Verdict.fail(problem, numel=numel)
        if numel % n == 0:
            d = numel * x.element_size()
            want = ring_bytes_per_rank("all_reduce", n, d)
            sent, sends = ledger.bytes_sent(), ledger.count("send")
            if sent != want or sends != 2 * (n - 1):
                return Verdict.fail(
                    f"the sum is right, but this rank sent {sends} messages / {sent:.0f} bytes; "
                    f"a ring sends 2(N-1) = {2 * (n - 1)} chunks of D/N: {want:.0f} bytes "
                    f"(D = {d} bytes). Sending whole tensors costs N/2 times more.",
                    bytes_sent=sent, expected_bytes=want, sends=sends)
    return Verdict.ok(f"matches all_reduce; {2 * (n - 1)} messages and 2(N-1)/N x D bytes "
                      "per rank, as the ring formula says")


def wrong_reduce_scatter_only(tensor, group):
    """Stops after the reduce-scatter phase: each rank has only its own chunk summed."""
    ring_reduce_scatter(tensor, group)
    return tensor


def wrong_library_call(tensor, group):
    """Correct numbers, but it is gloo's collective, not a ring built from send/recv."""
    dist.all_reduce(tensor, group=group)
    return tensor


def wrong_whole_tensor_ring(tensor, group):
    """Passes the WHOLE tensor around the ring N-1 times: right sum, (N-1) x D bytes."""
    n, _, right, left = _ring(group)
    passing, incoming = tensor.clone(), torch.empty_like(tensor)
    for _ in range(n - 1):
        _exchange(passing, incoming, right, left, group)
        tensor.add_(incoming)
        passing.copy_(incoming)
    return tensor


def wrong_average(tensor, group):
    """Averages instead of summing (all_reduce's default op is SUM)."""
    ring_all_reduce(tensor, group)
    return tensor.div_(dist.get_world_size(group))


register(Exercise(
    name="ring_all_reduce",
    lab="03_collectives",
    summary="sum a tensor over all ranks in place with a ring of isend/irecv: "
            "reduce-scatter phase then all-gather phase",
    signature="fn(tensor, group) -> tensor (summed in place)",
    check=check,
    reference=ring_all_reduce,
    solution_helpers=(_ring, _exchange, _chunks, ring_reduce_scatter, ring_all_gather),
    wrong={"reduce-scatter phase only": wrong_reduce_scatter_only,
           "calls dist.all_reduce": wrong_library_call,
           "passes the whole tensor": wrong_whole_tensor_ring,
           "averages instead of sums": wrong_average},
    world_size=4,
    timeout_s=60,
    hint="split the flat tensor into N chunks (tensor_split); in step s of the first phase "
         "send chunk (r-s-1) % N to the right and add what arrives from the left into chunk "
         "(r-s-2) % N; then circulate the finished chunks for N-1 more steps.",
))
