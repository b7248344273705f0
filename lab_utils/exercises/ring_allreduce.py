"""Exercise (lab 03): ring all-reduce from send/recv.

The learner writes ``fn(tensor, group)`` that sums ``tensor`` over the ranks of ``group`` in
place using only point-to-point calls (dist.isend / dist.irecv / send / recv). The check runs
it on 4 ranks in three configurations that separate right from accidentally right: the whole
world; two sub-groups [0, 2] and [1, 3] at once (not WORLD, members not neighbours in global
numbering: a ring that ignores ``group`` sums all four ranks, one that sends to group ranks
as if they were global ranks reaches the wrong peers); and a group of 3 ([1, 2, 3], rank 0
alone in a group of 1: an odd size, uneven chunks). It compares with gloo's all_reduce over
the same group, requires the sum IN PLACE in the tensor it was given (the text says in place:
a new tensor returned with the input untouched is rejected), and, with a CommLedger, the
ring's traffic: 2(N-1) sends of D/N bytes, i.e. 2(N-1)/N * D bytes per rank, and no
collective.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from lab_utils.calc.comm import ring_bytes_per_rank
from lab_utils.exercises._core import Exercise, Verdict, compare_tensors, first_problem, register
from lab_utils.measure import CommLedger
from lab_utils.parallel.collectives import (
    exchange,
    ring_all_gather,
    ring_all_reduce,
    ring_chunks,
    ring_neighbours,
    ring_reduce_scatter,
)

SIZES = (1020, 10)  # 1020 floats: N = 1, 2, 3, 4 divide it, so bytes must match the formula
# exactly; 10 floats on 4 ranks: uneven chunks (3, 3, 2, 2), on 3: (4, 3, 3)
PARTITIONS = (
    ("the whole world", ((0, 1, 2, 3),)),
    ("sub-groups [0, 2] and [1, 3]", ((0, 2), (1, 3))),
    ("groups [1, 2, 3] and [0]", ((1, 2, 3), (0,))),
)


def _in_group(fn: Any, group: Any, group_ranks: tuple[int, ...], me: int) -> str | None:
    """One configuration on this rank's group: a problem (str) or None. Every rank of the
    world runs the same collectives here (the WORLD sum, for the diagnosis) in the same order."""
    n = len(group_ranks)
    for numel in SIZES:
        g = torch.Generator().manual_seed(1000 * me + numel)
        x = torch.randn(numel, generator=g)  # (numel,) different on every rank
        expected, everyone = x.clone(), x.clone()
        dist.all_reduce(expected, group=group)
        dist.all_reduce(everyone)  # the sum over the WHOLE world: what ignoring `group` gives
        got = x.clone()
        with CommLedger() as ledger:
            out = fn(got, group)
        other = sorted({r.op for r in ledger.records} - {"send", "recv"})
        if other:
            return (
                f"your function called {', '.join(other)}: build the ring from send/recv "
                "(isend/irecv) only"
            )
        if (
            isinstance(out, torch.Tensor)
            and out is not got
            and torch.equal(got, x)
            and compare_tensors(out, expected, rtol=1e-5, atol=1e-5) is None
        ):
            return (
                f"the sum of {numel} floats is right, but in a NEW tensor: the tensor you "
                "were given is unchanged. The ring works in place (like dist.all_reduce): "
                "write the sums into `tensor`'s own chunks (views), then return it"
            )
        problem = compare_tensors(
            got,
            expected,
            what=f"sum of {numel} floats (in `tensor`)",
            rtol=1e-5,
            atol=1e-5,
            unchanged=x,
        )
        if problem and n < 4 and torch.allclose(got, everyone, rtol=1e-5, atol=1e-5):
            return (
                f"the result is the sum over ALL 4 ranks, but this group has {n} "
                f"({list(group_ranks)}): the ring ignored `group`. Take n and your position "
                "from dist.get_world_size(group) / dist.get_rank(group), and pass "
                "group=group to every send and recv"
            )
        if problem and n > 1 and torch.allclose(got, expected / n, rtol=1e-5, atol=1e-5):
            return (
                f"the result is 1/{n} of the sum: you averaged, but this all-reduce SUMS "
                "(as dist.all_reduce does by default); do not divide by N"
            )
        if problem and n > 1:
            r = group_ranks.index(me)
            mine, want = got.tensor_split(n)[r], expected.tensor_split(n)[r]
            if torch.allclose(mine, want, rtol=1e-5, atol=1e-5):
                return (
                    f"only this rank's own chunk ({r} of {n}) holds the full sum: that is "
                    "where the reduce-scatter phase leaves it. The all-gather phase is "
                    "missing: N-1 more steps pass each finished chunk around the ring"
                )
        if problem:
            return problem
        if numel % n == 0 and n > 1:
            d = numel * x.element_size()
            want = ring_bytes_per_rank("all_reduce", n, d)
            sent, sends = ledger.bytes_sent(), ledger.count("send")
            if sent != want or sends != 2 * (n - 1):
                return (
                    f"the sum is right, but this rank sent {sends} messages / {sent:.0f} "
                    f"bytes; a ring of N = {n} sends 2(N-1) = {2 * (n - 1)} chunks of D/N: "
                    f"{want:.0f} bytes (D = {d} bytes). Sending whole tensors costs N/2 "
                    "times more."
                )
    return None


def check(ctx, fn) -> Verdict:
    me = ctx.rank
    for name, partition in PARTITIONS:
        groups = [(ranks, dist.new_group(list(ranks))) for ranks in partition]  # every rank
        ranks, group = next((r, g) for r, g in groups if me in r)
        if len(partition) == 1:
            group = ctx.group
        problem = _in_group(fn, group, ranks, me)
        found = first_problem(problem, ctx.group)  # every rank learns it
        if found:
            return Verdict.fail(f"{name}, rank {found[0]}: {found[1]}")
    return Verdict.ok(
        "matches all_reduce in place on the whole world, on sub-groups [0, 2] / "
        "[1, 3] and on a group of 3; 2(N-1) messages and 2(N-1)/N x D bytes per "
        "rank, as the ring formula says"
    )


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
    n, _, right, left = ring_neighbours(group)
    passing, incoming = tensor.clone(), torch.empty_like(tensor)
    for _ in range(n - 1):
        exchange(passing, incoming, right, left, group)
        tensor.add_(incoming)
        passing.copy_(incoming)
    return tensor


def wrong_new_tensor(tensor, group):
    """Right sum, but in a copy: the caller's tensor is unchanged (the text says in place)."""
    out = tensor.clone()
    ring_all_reduce(out, group)
    return out


def wrong_ignores_group(tensor, group):
    """The ring over the default group: every rank of the job, whatever `group` says."""
    ring_all_reduce(tensor, None)
    return tensor


def wrong_average(tensor, group):
    """Averages instead of summing (all_reduce's default op is SUM)."""
    ring_all_reduce(tensor, group)
    return tensor.div_(dist.get_world_size(group))


register(
    Exercise(
        name="ring_all_reduce",
        lab="03_collectives",
        summary="sum a tensor over all ranks in place with a ring of isend/irecv: "
        "reduce-scatter phase then all-gather phase",
        signature="fn(tensor, group) -> tensor (summed in place)",
        check=check,
        reference=ring_all_reduce,
        solution_helpers=(
            ring_neighbours,
            exchange,
            ring_chunks,
            ring_reduce_scatter,
            ring_all_gather,
        ),
        wrong={
            "reduce-scatter phase only": wrong_reduce_scatter_only,
            "calls dist.all_reduce": wrong_library_call,
            "passes the whole tensor": wrong_whole_tensor_ring,
            "averages instead of sums": wrong_average,
            "returns a new tensor, input untouched": wrong_new_tensor,
            "ignores the group argument": wrong_ignores_group,
        },
        world_size=4,
        timeout_s=60,
        hint="split the flat tensor into N chunks (tensor_split); in step s of the first phase "
        "send chunk (r-s-1) % N to the right and add what arrives from the left into chunk "
        "(r-s-2) % N; then circulate the finished chunks for N-1 more steps.",
    )
)
