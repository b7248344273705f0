"""Exercise "naive_ddp" (lab 04): the gradient synchronisation of naive DDP.

The learner writes fn(model, group) -> None, called on every rank of ``group`` right after
loss.backward(): afterwards every parameter's .grad must hold the AVERAGE of that gradient over
the group's ranks (each rank trained on its own shard), in place, so that every replica takes the
same optimizer step as one process on the group's whole batch. Parameters whose .grad is None
(frozen, or unused in this forward) are None on every rank alike and must stay None.

The grader runs the function in three configurations that separate right from accidentally
right: the whole world of 4 ranks; two sub-groups [0, 2] and [1, 3] at once (not WORLD: a
solution that ignores ``group`` mixes the groups, one that divides by the world size divides by
4 instead of 2); and a group of 3 of the 4 ranks (an odd size). It compares every gradient with
the single-process gradient of the group's batch, and requires an all-reduce's traffic: at most
2(n-1)/n x the gradient bytes per rank (the CommLedger), whatever the number of calls.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.calc.comm import ring_bytes_per_rank
from lab_utils.exercises._core import Exercise, Verdict, compare_tensors, first_problem, register
from lab_utils.parallel.data_parallel import average_gradients as reference

PARTITIONS = (((0, 1, 2, 3),), ((0, 2), (1, 3)), ((0, 1, 2),))  # groups of global ranks
BATCH = 4  # samples per rank


class _Net(nn.Module):
    """A small net with two parameters that get no gradient: a frozen scale and an unused layer."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)  # the same weights on every rank
        self.body = nn.Linear(6, 8)
        self.head = nn.Linear(8, 3)
        self.unused = nn.Linear(8, 8)  # never called in forward: its .grad stays None
        self.scale = nn.Parameter(torch.ones(3), requires_grad=False)  # frozen: no .grad
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            self.scale.fill_(1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.body(x))) * self.scale


def _batch(global_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + global_rank)
    return torch.randn(BATCH, 6, generator=g), torch.randn(BATCH, 3, generator=g)


def _grads(ranks: tuple[int, ...]) -> dict[str, torch.Tensor | None]:
    """One process, the batches of ``ranks`` concatenated: the gradients DDP must reproduce."""
    net = _Net()
    xs, ys = zip(*(_batch(r) for r in ranks))
    nn.functional.mse_loss(net(torch.cat(xs)), torch.cat(ys)).backward()
    return {n: None if p.grad is None else p.grad.clone() for n, p in net.named_parameters()}


def _same(a: dict, b: dict) -> bool:
    return all(
        (a[n] is None) == (b[n] is None)
        and (a[n] is None or torch.allclose(a[n], b[n], rtol=1e-5, atol=1e-7))
        for n in a
    )


def _scaled(d: dict, k: float) -> dict:
    return {n: None if g is None else g * k for n, g in d.items()}


def _diagnose(got: dict, ctx: Any, world_size: int) -> str | None:
    """None if right; else what went wrong, named by its likely cause."""
    n = ctx.world_size
    want = _grads(ctx.group_ranks)
    for name, g in got.items():
        if want[name] is None and g is not None:
            return (
                f"{name} got a gradient, but it took no part in this backward (frozen or "
                "unused: its .grad was None). Leave such parameters alone: an optimizer "
                "would now update them (weight decay, momentum), unlike torch DDP"
            )
        if want[name] is not None and g is None:
            return f"the gradient of {name} disappeared (it is None after your function)"
    if _same(got, want):
        return None
    if _same(got, _grads((ctx.global_rank,))):
        return (
            "every rank still holds its LOCAL gradient: nothing reached p.grad. all_reduce "
            "works in place on the tensor you pass: reduce p.grad itself (not a copy), or "
            "copy the result back"
        )
    if _same(got, _scaled(want, n)):
        return (
            f"the gradients are {n}x the average: they were summed over the {n} ranks but "
            f"not divided by {n}, so every update would be {n} times too big"
        )
    if n != world_size and _same(got, _scaled(want, n / world_size)):
        return (
            f"divided by {world_size}, the size of the WHOLE world, but this group has {n} "
            "ranks: the average is over the group (dist.get_world_size(group))"
        )
    if _same(got, _scaled(want, 1 / n)):
        return (
            f"the gradients are 1/{n} of the average: divided by {n} twice (e.g. a division "
            "and ReduceOp.AVG), so every update would be too small"
        )
    everyone = _grads(tuple(range(world_size)))
    if n != world_size and any(
        _same(got, _scaled(everyone, world_size / k)) for k in (n, world_size)
    ):
        return (
            "the result mixes in gradients of ranks OUTSIDE the group: the all-reduce ran on "
            "the default (whole-world) group; pass group=group to every collective"
        )
    name = next(
        k
        for k in got
        if got[k] is not None and not torch.allclose(got[k], want[k], rtol=1e-5, atol=1e-7)
    )
    return f"{compare_tensors(got[name], want[name], what=f'gradient of {name}')}"


def check_in_group(ctx: Any, fn: Any, world_size: int) -> str | None:
    """One configuration, on the ranks of ctx.group: a problem (str) or None."""
    from lab_utils.measure import CommLedger

    net = _Net()
    x, y = _batch(ctx.global_rank)
    nn.functional.mse_loss(net(x), y).backward()  # this rank's local gradients
    with CommLedger() as ledger:
        try:
            fn(net, ctx.group)
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - the learner's error becomes the verdict
            hint = ""
            if isinstance(exc, (AttributeError, TypeError)) and "None" in str(exc):
                hint = (
                    " -- some parameters have .grad None (here `scale`, frozen, and "
                    "`unused`, never called): skip them, they are None on every rank alike"
                )
            return f"your function raised {type(exc).__name__}: {exc}{hint}"
    got = {
        n: None if p.grad is None else p.grad.detach().clone() for n, p in net.named_parameters()
    }
    problem = _diagnose(got, ctx, world_size)
    if problem:
        return problem
    grad_bytes = sum(g.numel() * g.element_size() for g in got.values() if g is not None)
    limit = ring_bytes_per_rank("all_reduce", ctx.world_size, grad_bytes)
    if ledger.bytes_sent() > limit * (1 + 1e-9):
        ops = sorted({r.op for r in ledger.records})
        return (
            f"the gradients are right, but this rank sent {ledger.bytes_sent():.0f} B "
            f"(ledger) with {ops}; an all-reduce of the {grad_bytes} B of gradients sends "
            f"2(n-1)/n x {grad_bytes} = {limit:.0f} B per rank, which is what DDP costs"
        )
    return None


def check(ctx: Any, fn: Any) -> Verdict:
    """Every configuration of PARTITIONS in one launch of 4 ranks; ranks in no group sit out."""
    me, world = ctx.rank, ctx.world_size
    for partition in PARTITIONS:
        groups = [
            dist.new_group(list(ranks)) for ranks in partition
        ]  # every rank makes every group
        problem = None
        for ranks, group in zip(partition, groups):
            if me in ranks:
                gctx = SimpleNamespace(
                    rank=ranks.index(me),
                    world_size=len(ranks),
                    group=group,
                    global_rank=me,
                    group_ranks=ranks,
                )
                problem = check_in_group(gctx, fn, world)
        found = first_problem(problem, ctx.group)  # every rank learns the verdict
        if found:
            where = " and ".join(str(list(g)) for g in partition)
            return Verdict.fail(
                f"with group(s) {where} of {world} ranks, rank {found[0]}: {found[1]}"
            )
    return Verdict.ok(
        "every gradient is the group's average, on the whole world, on two "
        "sub-groups of 2 and on a group of 3; 2(n-1)/n x the gradient bytes per rank"
    )


# ---- known-wrong answers (tests/test_exercises.py requires every one rejected) ---------------
def wrong_sum_not_average(model, group):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)


def wrong_divides_by_world_size(model, group):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad /= dist.get_world_size()  # the WORLD's size, not the group's


def wrong_ignores_group(model, group):
    n = dist.get_world_size(group)
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)  # default group: every rank of the job
            p.grad /= n


def wrong_no_skip_of_missing_grads(model, group):
    n = dist.get_world_size(group)
    for p in model.parameters():
        p.grad.div_(n)  # AttributeError on a parameter without a gradient
        dist.all_reduce(p.grad, group=group)


def wrong_zero_fills_missing_grads(model, group):
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)  # now the optimizer updates a frozen/unused parameter
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=group)


def wrong_reduces_a_copy(model, group):
    n = dist.get_world_size(group)
    for p in model.parameters():
        if p.grad is not None:
            g = p.grad / n  # a NEW tensor: the sum lands there, p.grad keeps the local value
            dist.all_reduce(g, group=group)


def wrong_averages_twice(model, group):
    n = dist.get_world_size(group)
    for p in model.parameters():
        if p.grad is not None:
            p.grad.div_(n)
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=group)


register(
    Exercise(
        name="naive_ddp",
        lab="04_data_parallel",
        summary=(
            "naive DDP's gradient sync: after backward, every .grad becomes its average over "
            "the group"
        ),
        signature="fn(model: nn.Module, group) -> None; called after loss.backward() on every rank "
        "of group; afterwards each p.grad holds the group's average (in place)",
        check=check,
        reference=reference,
        wrong={
            "sums without averaging (N x too big an update)": wrong_sum_not_average,
            "divides by the world size, not the group's": wrong_divides_by_world_size,
            "ignores the group argument": wrong_ignores_group,
            "crashes on a parameter without a gradient": wrong_no_skip_of_missing_grads,
            "gives unused/frozen parameters zero gradients": wrong_zero_fills_missing_grads,
            "all-reduces a copy of the gradient": wrong_reduces_a_copy,
            "averages twice": wrong_averages_twice,
        },
        world_size=4,
        timeout_s=60.0,
        hint="after backward every rank holds its own gradient; the job wants the mean over the "
        "ranks of `group`, in p.grad itself. Which collective sums across ranks, which group "
        "does it run on, what do you divide by, and what about a .grad that is None?",
    )
)
