"""Exercise (lab 06): a row-parallel linear, forward AND backward.

The learner writes fn(x_local, weight_local, bias, group) -> y:
    x_local      (B, T, C/t)  this rank's slice of the input features
    weight_local (N, C/t)     this rank's slice of the weight's input dim (nn.Linear layout)
    bias         (N,)         the whole bias, the same on every rank
    y            (B, T, N)    the FULL output x @ W^T + b, the same on every rank
y must be differentiable: the gradients reaching x_local, weight_local and bias must be the
slices of the unsharded layer's gradients. The sum over ranks is g (Megatron): all-reduce in
forward, identity in backward (an autograd.Function).

The check runs on 4 ranks in three configurations: the whole world (t = 4), two tensor-parallel
groups [0, 2] and [1, 3] at once (t = 2, not WORLD: an all-reduce on the default group sums the
partials of both groups), and a group of 3 (C = 8 features cut 3, 3, 2; rank 3 alone, t = 1).
A CommLedger requires exactly 1 all-reduce in forward, none in backward.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils.exercises._core import Exercise, Verdict, compare_tensors, first_problem, register
from lab_utils.parallel.tensor_parallel.comm import ReduceFromTP, all_reduce_copy


def reference(x_local, weight_local, bias, group):
    partial = F.linear(x_local, weight_local)  # (B, T, N): this rank's share of the sum
    y = ReduceFromTP.apply(partial, group)  # g: all-reduce forward, identity backward
    return y + bias  # once, after the sum


def wrong_no_all_reduce(x_local, weight_local, bias, group):
    return F.linear(x_local, weight_local, bias)


def wrong_bias_before_reduce(x_local, weight_local, bias, group):
    return ReduceFromTP.apply(F.linear(x_local, weight_local, bias), group)


class _AllReduceBoth(torch.autograd.Function):  # g with f's backward: wrong
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return all_reduce_copy(x, group)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce_copy(grad, ctx.group), None


def wrong_all_reduce_in_backward(x_local, weight_local, bias, group):
    return _AllReduceBoth.apply(F.linear(x_local, weight_local), group) + bias


def wrong_ignores_group(x_local, weight_local, bias, group):
    return ReduceFromTP.apply(F.linear(x_local, weight_local), None) + bias  # default group


PARTITIONS = (
    ("the whole world (t = 4)", ((0, 1, 2, 3),)),
    ("groups [0, 2] and [1, 3] (t = 2)", ((0, 2), (1, 3))),
    ("groups [0, 1, 2] (t = 3, uneven slices) and [3]", ((0, 1, 2), (3,))),
)


def _inputs(t: int, rank: int):
    g = torch.Generator().manual_seed(6)  # the same full tensors on every rank
    x, w = torch.randn(2, 3, 8, generator=g), torch.randn(6, 8, generator=g)  # (B, T, C), (N, C)
    b, grad_y = torch.randn(6, generator=g), torch.randn(2, 3, 6, generator=g)
    full = [v.clone().requires_grad_() for v in (x, w, b)]
    F.linear(*full).backward(grad_y)  # the unsharded layer's gradients
    local = [x.chunk(t, -1)[rank], w.chunk(t, 1)[rank], b]
    local = [v.clone().requires_grad_() for v in local]
    return full, local, grad_y


def _diagnose_forward(y, expected, local, t, world: int = 0) -> str | None:
    problem = compare_tensors(y, expected, what="output y")
    if problem is None or not isinstance(y, torch.Tensor) or y.shape != expected.shape:
        return problem
    x_l, w_l, b = (v.detach() for v in local)
    y = y.detach()
    if torch.allclose(y, F.linear(x_l, w_l, b), atol=1e-5) or torch.allclose(
        y, F.linear(x_l, w_l), atol=1e-5
    ):
        return (
            "y is this rank's PARTIAL sum x_i @ W_i^T: the input features are split, so "
            "every rank holds only part of each output; all-reduce (sum) the partials"
        )
    if world > t and torch.allclose(y, world / t * (expected - b) + b, atol=1e-4):
        return (
            f"y is {world // t} x the sum over this group: the all-reduce ran on the default "
            f"(whole-world) group of {world} ranks, adding the partials of the other groups; "
            "pass group=group to the all-reduce"
        )
    if t > 1 and torch.allclose(y, (expected - b) / t + b, atol=1e-5):
        return (
            f"y is 1/{t} of the sum: averaging partials is a DDP habit: row-parallel "
            "partial sums are SUMMED (each rank holds a different part of the same dot "
            "product, not a copy of it): all-reduce with op=SUM"
        )
    if torch.allclose(y - expected, (t - 1) * b, atol=1e-5):
        return (
            f"y = expected + {t - 1} x bias: the bias was added on every rank BEFORE the "
            f"all-reduce, so the sum counts it {t} times; add it once, after the reduce"
        )
    return problem


def _in_group(ctx, fn) -> Verdict:
    from lab_utils.measure import CommLedger

    t = ctx.world_size
    full, local, grad_y = _inputs(t, ctx.rank)
    expected = F.linear(*(v.detach() for v in full))
    with CommLedger() as ledger:
        with ledger.phase("forward"):
            y = fn(*local, ctx.group)
    problem = _diagnose_forward(y, expected, local, t, ctx.world)
    if problem is None and not y.requires_grad:
        problem = (
            "y does not require grad: the all-reduce must be part of the autograd graph "
            "(write g as a torch.autograd.Function)"
        )
    # Agree across ranks before any backward, so no rank waits in a collective alone.
    ok = torch.tensor([problem is None], dtype=torch.int32)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=ctx.group)
    if problem is not None:
        return Verdict.fail(problem)
    if not ok.item():
        return Verdict.fail("")  # another rank's output is wrong: check() reports its cause
    n_fwd = ledger.count("all_reduce", "forward")
    with ledger:
        with ledger.phase("backward"):
            y.backward(grad_y)  # the same upstream gradient on every rank, as in a real model
    n_bwd = ledger.count(phase="backward")
    for what, got, ref, dim in (
        ("x_local.grad", local[0].grad, full[0].grad, -1),
        ("weight_local.grad", local[1].grad, full[1].grad, 1),
        ("bias.grad", local[2].grad, full[2].grad, None),
    ):
        ref = ref if dim is None else ref.chunk(t, dim)[ctx.rank]
        problem = compare_tensors(got, ref, what=what)
        if problem and what == "bias.grad" and got is None:
            problem = (
                "bias.grad is None on this rank although y is right: the bias was added "
                "on one rank only, before the all-reduce, so the other ranks' bias never "
                "gets a gradient and their copies drift apart; add it on every rank, "
                "after the reduce"
            )
        if problem:
            if n_bwd:
                problem += (
                    f" - and backward made {n_bwd} collective call(s): g's backward is "
                    "the identity (the incoming gradient is already the same on every "
                    f"rank; all-reducing it multiplies it by {t})"
                )
            return Verdict.fail(problem)
    if n_fwd != 1 or n_bwd != 0:
        return Verdict.fail(
            f"right numbers, but {n_fwd} all-reduce(s) in forward and {n_bwd} "
            "collective(s) in backward; Megatron's row-parallel linear needs "
            "exactly 1 and 0"
        )
    return Verdict.ok(
        "output and gradients match the unsharded linear; 1 all-reduce forward, 0 backward",
        forward_all_reduces=n_fwd,
        backward_collectives=n_bwd,
    )


def check(ctx, fn) -> Verdict:
    me, done = ctx.rank, []
    for name, partition in PARTITIONS:
        groups = [(ranks, dist.new_group(list(ranks))) for ranks in partition]  # every rank
        ranks, group = next((r, g) for r, g in groups if me in r)
        gctx = SimpleNamespace(
            rank=ranks.index(me),
            world_size=len(ranks),
            world=ctx.world_size,
            group=ctx.group if len(partition) == 1 else group,
        )
        verdict = _in_group(gctx, fn)
        found = first_problem(None if verdict.passed else verdict.message, ctx.group)
        if found:  # every rank stops together, with the first failing rank's cause
            return Verdict.fail(f"{name}, rank {found[0]}: {found[1]}")
        done.append(name)
    return Verdict.ok(
        f"{'; '.join(done)}: output and gradients match the unsharded linear; "
        "1 all-reduce forward, 0 backward"
    )


register(
    Exercise(
        name="row_parallel",
        lab="06_tensor_parallel",
        summary=(
            "row-parallel linear: sum the partial products with g (all-reduce forward, "
            "identity backward), add the bias once"
        ),
        signature="fn(x_local (B,T,C/t), weight_local (N,C/t), bias (N,), group) -> y (B,T,N)",
        hint="what does each rank hold of each output element, and what makes it whole? How many "
        "times must the bias be counted? In backward, is the incoming gradient already the same "
        "on every rank, and what does the sum's Jacobian do to it?",
        check=check,
        reference=reference,
        wrong={
            "forgets the all-reduce": wrong_no_all_reduce,
            "adds the bias on every rank before the all-reduce": wrong_bias_before_reduce,
            "all-reduces the gradient in backward too": wrong_all_reduce_in_backward,
            "all-reduces on the default group": wrong_ignores_group,
        },
        world_size=4,
        timeout_s=60.0,
        solution_helpers=(all_reduce_copy, ReduceFromTP),
    )
)
