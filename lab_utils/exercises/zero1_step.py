"""Exercise "zero1_step" (lab 05): one ZeRO-1 optimizer step on a flat parameter buffer.

The learner writes fn(flat_param, flat_grad, shard, optimizer, group) -> None:
  1. reduce-scatter the gradients (mean over ranks) so rank r gets slice r,
  2. let `optimizer` (built over [shard] only: its Adam m, v are 1/K of the model's) update it,
  3. all-gather the updated slices back into flat_param on every rank.
The check runs one SGD step (a missing average shows up as K x the update: Adam would hide it)
and two AdamW steps, compares every rank's flat_param with a single-process reference, and
requires the ZeRO-1 pattern in the CommLedger: 1 reduce-scatter + 1 all-gather, 2(K-1)/K x 4P
bytes sent per step (an all-reduce gives the right numbers for 1.5x the bytes). It does so in
two configurations: the whole world (K = 4), and two data-parallel groups [0, 2] and [1, 3]
at once (K = 2, not WORLD: a mean that divides by the world's size is half the group's, a
collective on the default group mixes the two groups' gradients).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.exercises._core import (
    Exercise,
    Verdict,
    compare_tensors,
    first_problem,
    raised_in,
    register,
)
from lab_utils.parallel.zero import zero1_step as reference

P_PER_RANK = 6  # P = 6 K elements, divisible by K
PARTITIONS = (((0, 1, 2, 3),), ((0, 2), (1, 3)))  # groups of global ranks, one config each


def _grad(step: int, rank: int, n: int) -> torch.Tensor:
    """Rank `rank`'s gradient at `step` (every rank can compute every rank's)."""
    return torch.randn(n, generator=torch.Generator().manual_seed(1000 * step + rank))


def _init(n: int) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(7))


def _mean_grad(step: int, ranks: tuple[int, ...], n: int) -> torch.Tensor:
    return torch.stack([_grad(step, r, n) for r in ranks]).mean(0)


def _expected(
    n: int, ranks: tuple[int, ...], opt: str, steps: int, lr: float, accumulate: bool = False
) -> torch.Tensor:
    """Single process: the full parameters, the MEAN gradient of the group's ranks (global
    ranks ``ranks``), a full optimizer (``accumulate``: gradients never zeroed, a mistake)."""
    p = nn.Parameter(_init(n))
    o = torch.optim.SGD([p], lr=lr) if opt == "sgd" else torch.optim.AdamW([p], lr=lr)
    for t in range(steps):
        p.grad = _mean_grad(t, ranks, n) + (p.grad if accumulate and p.grad is not None else 0)
        o.step()
    return p.detach()


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def _diagnose(
    got: torch.Tensor, shard: torch.Tensor, ctx, opt: str, steps: int, lr: float
) -> str | None:
    """None if right; else what went wrong, shard by shard."""
    k, r, n = ctx.world_size, ctx.rank, P_PER_RANK * ctx.world_size
    want = _expected(n, ctx.group_ranks, opt, steps, lr)
    problem = compare_tensors(got, want, what="flat_param", rtol=1e-5, atol=1e-6)
    if problem is None:
        return None
    start = _init(n)
    shards = lambda t: t.view(k, P_PER_RANK)  # noqa: E731 - (K, P/K): one row per rank's slice
    if _close(got, _mean_grad(steps - 1, ctx.group_ranks, n)):
        return (
            "flat_param holds the averaged GRADIENT: the all-gather sent shard.grad; "
            "all-gather the updated parameters (the shard itself) after the step"
        )
    if (
        torch.equal(got, start)
        and torch.equal(shard.detach(), shards(start)[r])
        and (shard.grad is not None)
    ):
        return (
            "the optimizer stepped before shard.grad was set (it skips a parameter whose "
            ".grad is None), so nothing moved: set shard.grad first, then optimizer.step()"
        )
    if opt == "sgd" and 1 < k == ctx.world and _close(got, start + (want - start) / k):
        return (
            f"the update is 1/{k} of the right one: you average twice: ReduceOp.AVG already "
            "divides by the group size, so do not divide the result again"
        )
    if steps > 1 and _close(got, _expected(n, ctx.group_ranks, opt, steps, lr, True)):
        return (
            "the second step used the SUM of both steps' gradients: shard.grad was never "
            "zeroed (assign the reduced slice to shard.grad, do not add to it)"
        )
    ok = [torch.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(shards(got), shards(want))]
    stale = [torch.equal(g, s) for g, s in zip(shards(got), shards(start))]
    if ok[r] and all(stale[s] for s in range(k) if s != r):
        return (
            "your own slice is right but the other ranks' slices never changed: the "
            "all-gather is missing, so the replicas drift apart"
        )
    if torch.equal(got, start):
        return (
            "flat_param did not change: the updated shard never reached it (all-gather "
            "AFTER optimizer.step())"
        )
    if opt == "sgd" and torch.allclose(got, start + k * (want - start), rtol=1e-5, atol=1e-6):
        return (
            f"the update is {k} x too big: the gradients were SUMMED over the {k} ranks, "
            "not averaged (op=dist.ReduceOp.AVG, or divide by K)"
        )
    if (
        opt == "sgd"
        and k != ctx.world
        and torch.allclose(got, start + k / ctx.world * (want - start), rtol=1e-5, atol=1e-6)
    ):
        return (
            f"the update is {k}/{ctx.world} of the right one: the sum was divided by "
            f"{ctx.world}, the size of the WHOLE world, but this group has K = {k} ranks "
            "(dist.get_world_size(group), or op=dist.ReduceOp.AVG over `group`)"
        )
    if k != ctx.world and torch.allclose(
        got, _expected(n, tuple(range(ctx.world)), opt, steps, lr), rtol=1e-5, atol=1e-6
    ):
        return (
            "the update used the mean gradient of ALL ranks, not of this group's: a "
            "collective ran on the default group; pass group=group to every collective"
        )
    local = start.clone()  # the update from this rank's OWN gradient, never reduced
    local[r * P_PER_RANK : (r + 1) * P_PER_RANK] -= (
        lr * _grad(0, ctx.global_rank, n)[r * P_PER_RANK : (r + 1) * P_PER_RANK]
    )
    if opt == "sgd" and k > 1 and torch.allclose(shards(got)[r], shards(local)[r], atol=1e-6):
        return (
            "slice r moved by THIS rank's gradient only: the gradients were not reduced "
            "over ranks (reduce-scatter them first)"
        )
    if not ok[r]:
        return f"this rank's slice {r} is wrong after the update ({problem})"
    return problem


def _in_group(ctx, fn) -> tuple[str | None, float]:
    """One configuration on ctx's group (ctx.rank, world_size: within the group): a problem
    (str) or None, and the bytes one AdamW run sent. The ranks of the group stop together."""
    from lab_utils.measure import CommLedger

    k, r = ctx.world_size, ctx.rank
    n = P_PER_RANK * k
    lo, hi = r * P_PER_RANK, (r + 1) * P_PER_RANK
    want_bytes = 0.0
    for opt, steps, lr in (("sgd", 1, 0.1), ("adamw", 2, 0.01)):
        flat_param = _init(n)
        shard = nn.Parameter(flat_param[lo:hi].clone())  # (P/K,): this rank's slice
        o = torch.optim.SGD([shard], lr=lr) if opt == "sgd" else torch.optim.AdamW([shard], lr=lr)
        try:
            with CommLedger() as ledger:
                for t in range(steps):
                    fn(flat_param, _grad(t, ctx.global_rank, n), shard, o, ctx.group)
            problem = _diagnose(flat_param, shard, ctx, opt, steps, lr)
        except RuntimeError as exc:  # each rank checks a collective's sizes before it sends
            problem = raised_in(exc, wrong_group=k != ctx.world)
        # Every rank stops together (a rank that went on alone would wait in a collective).
        found = first_problem(problem, ctx.group)
        if found:  # "": another rank of the group has the problem, and check() reports it
            return (f"{opt}, {steps} step(s): {problem}" if problem else ""), 0.0
        want_bytes = steps * 2 * (k - 1) / k * 4 * n
        if k > 1 and (
            ledger.count("reduce_scatter") != steps
            or ledger.count("all_gather") != steps
            or ledger.count("all_reduce")
            or ledger.bytes_sent() != want_bytes
        ):
            by_op = {op: row["count"] for op, row in ledger.summary()["by_op"].items()}
            return (
                f"the numbers are right, but the communication is not ZeRO-1's: you called "
                f"{by_op} and sent {ledger.bytes_sent():.0f} B per rank; one reduce-scatter "
                f"+ one all-gather per step send 2(K-1)/K x 4P = {want_bytes:.0f} B (an "
                "all-reduce alone already sends that much, before the all-gather)"
            ), 0.0
    return None, want_bytes


def check(ctx, fn) -> Verdict:
    me, world = ctx.rank, ctx.world_size
    sent = {}
    for partition in PARTITIONS:
        groups = [(ranks, dist.new_group(list(ranks))) for ranks in partition]  # every rank
        ranks, group = next((r, g) for r, g in groups if me in r)
        gctx = SimpleNamespace(
            rank=ranks.index(me),
            world_size=len(ranks),
            world=world,
            group=ctx.group if len(partition) == 1 else group,
            global_rank=me,
            group_ranks=ranks,
        )
        problem, sent[len(ranks)] = _in_group(gctx, fn)
        found = first_problem(problem, ctx.group)  # every rank learns it
        if found:
            where = " and ".join(str(list(g)) for g in partition)
            return Verdict.fail(f"with group(s) {where}, rank {found[0]}: {found[1]}")
    return Verdict.ok(
        f"SGD and AdamW match the single-process optimizer on the whole world "
        f"(K = {world}) and on groups [0, 2] / [1, 3] (K = 2); "
        f"{sent[world]:.0f} B sent per rank in 2 AdamW steps at K = {world} "
        "(= 2 x 2(K-1)/K x 4P)"
    )


# ---- known-wrong answers (tests/test_exercises.py requires every one rejected) ---------------
def wrong_sum_not_mean(flat_param, flat_grad, shard, optimizer, group):
    grad_shard = torch.empty_like(shard)
    dist.reduce_scatter_single(grad_shard, flat_grad, op=dist.ReduceOp.SUM, group=group)
    shard.grad = grad_shard
    optimizer.step()
    dist.all_gather_single(flat_param, shard.detach(), group=group)


def wrong_no_all_gather(flat_param, flat_grad, shard, optimizer, group):
    grad_shard = torch.empty_like(shard)
    dist.reduce_scatter_single(grad_shard, flat_grad, op=dist.ReduceOp.AVG, group=group)
    shard.grad = grad_shard
    optimizer.step()
    k, r = dist.get_world_size(group), dist.get_rank(group)
    flat_param.view(k, -1)[r].copy_(shard.detach())  # only my own slice: ranks diverge


def wrong_local_grad(flat_param, flat_grad, shard, optimizer, group):
    k, r = dist.get_world_size(group), dist.get_rank(group)
    shard.grad = flat_grad.view(k, -1)[r].clone()  # my slice of MY gradient: never reduced
    optimizer.step()
    dist.all_gather_single(flat_param, shard.detach(), group=group)


def wrong_all_reduce_then_slice(flat_param, flat_grad, shard, optimizer, group):
    k, r = dist.get_world_size(group), dist.get_rank(group)
    grad = flat_grad.clone()
    dist.all_reduce(grad, op=dist.ReduceOp.AVG, group=group)  # right numbers, 2(K-1)/K x 4P
    shard.grad = grad.view(k, -1)[r].clone()
    optimizer.step()
    dist.all_gather_single(flat_param, shard.detach(), group=group)


def wrong_divides_by_world_size(flat_param, flat_grad, shard, optimizer, group):
    grad_shard = torch.empty_like(shard)
    dist.reduce_scatter_single(grad_shard, flat_grad, op=dist.ReduceOp.SUM, group=group)
    shard.grad = grad_shard / dist.get_world_size()  # the WORLD's size, not the group's
    optimizer.step()
    dist.all_gather_single(flat_param, shard.detach(), group=group)


def wrong_gathers_before_update(flat_param, flat_grad, shard, optimizer, group):
    grad_shard = torch.empty_like(shard)
    dist.reduce_scatter_single(grad_shard, flat_grad, op=dist.ReduceOp.AVG, group=group)
    dist.all_gather_single(flat_param, shard.detach(), group=group)  # the OLD shards
    shard.grad = grad_shard
    optimizer.step()


register(
    Exercise(
        name="zero1_step",
        lab="05_zero_fsdp",
        summary="one ZeRO-1 step: reduce-scatter grads, update my shard, all-gather params",
        signature="fn(flat_param (P,), flat_grad (P,), shard: Parameter (P/K,), optimizer, group)"
        " -> None; updates flat_param in place on every rank",
        check=check,
        reference=reference,
        wrong={
            "sums instead of averaging": wrong_sum_not_mean,
            "skips the all-gather (ranks diverge)": wrong_no_all_gather,
            "updates with the local, unreduced gradient": wrong_local_grad,
            "all-reduce then slice (1.5x the bytes)": wrong_all_reduce_then_slice,
            "all-gathers before the update": wrong_gathers_before_update,
            "divides by the world size, not the group's": wrong_divides_by_world_size,
        },
        world_size=4,
        timeout_s=60.0,
        hint="three phases: which collective leaves rank r with slice r of the MEAN gradient over "
        "the group? What must the optimizer see before it steps on `shard`? Which collective "
        "then gives every rank every updated slice, and on which group?",
    )
)
