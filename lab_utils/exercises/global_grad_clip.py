"""Exercise "global_grad_clip" (lab 14): gradient clipping when each rank holds a SHARD.

Under FSDP (or ZeRO-2, or TP) no rank holds the whole gradient, yet clipping must scale every
shard by the SAME factor, computed from the norm of the whole gradient:

    total = sqrt(sum over ALL shards on ALL ranks of sum(g^2))
    if total > max_norm: every shard g *= max_norm / total

The learner writes it:

    fn(grads: list[Tensor] (this rank's shards, scaled IN PLACE), max_norm: float, group) -> float
    (the global norm before clipping)

A rank that clips by its own shard's norm trains without any error and drifts from the single
process run: each shard is scaled by a different factor (the zoo's "local norm" bug).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from lab_utils.exercises._core import Exercise, Verdict, register


def clip_to(grads, total: float, max_norm: float) -> float:
    """Scale every shard by max_norm / total when total exceeds max_norm; return total."""
    if total > max_norm:
        for g in grads:
            g.mul_(max_norm / total)
    return total


def global_grad_clip(grads, max_norm: float, group) -> float:
    """One all-reduce (SUM) of this rank's sum of squares; every rank then scales by the same
    factor, and only when the norm exceeds max_norm (torch.nn.utils.clip_grad_norm_'s rule)."""
    sq = torch.zeros(1, dtype=torch.float64)
    for g in grads:
        sq += g.double().pow(2).sum()
    dist.all_reduce(sq, group=group)  # squares add across shards; norms do not
    return clip_to(grads, sq.sqrt().item(), max_norm)


# ----------------------------------------------------------------------------- wrong versions
def _local_sq(grads) -> torch.Tensor:
    return sum(g.pow(2).sum() for g in grads).reshape(1)


def wrong_local_norm(grads, max_norm: float, group) -> float:
    """Clips by this rank's shard only: every rank scales by a different factor."""
    return clip_to(grads, _local_sq(grads).sqrt().item(), max_norm)


def wrong_sum_of_norms(grads, max_norm: float, group) -> float:
    """All-reduces the shards' NORMS: norms do not add, so the total comes out too large."""
    norm = _local_sq(grads).sqrt()
    dist.all_reduce(norm, group=group)
    return clip_to(grads, norm.item(), max_norm)


def wrong_average_of_squares(grads, max_norm: float, group) -> float:
    """ReduceOp.AVG on the squares: the norm comes out sqrt(group size) too small."""
    sq = _local_sq(grads)
    dist.all_reduce(sq, op=dist.ReduceOp.AVG, group=group)
    return clip_to(grads, sq.sqrt().item(), max_norm)


def wrong_always_rescales(grads, max_norm: float, group) -> float:
    """Scales to max_norm even when the norm is below it: small gradients get BIGGER."""
    sq = _local_sq(grads)
    dist.all_reduce(sq, group=group)
    total = sq.sqrt().item()
    for g in grads:
        g.mul_(max_norm / total)
    return total


# ----------------------------------------------------------------------------- the grader
def _shards(rank: int, scale: float) -> list[torch.Tensor]:
    """Rank ``rank``'s shards of two parameters, uneven (the last rank's first shard is empty,
    as FSDP's padding can leave it)."""
    g = torch.Generator().manual_seed(90 + rank)
    first = 0 if rank == 3 else 5 + rank
    return [scale * torch.randn(first, generator=g), scale * torch.randn(3, 4, generator=g)]


CASES = (
    ("large gradients (the norm exceeds max_norm)", 3.0, 1.0),
    ("small gradients (the norm is below max_norm: nothing changes)", 0.01, 1.0),
)


def _global(scale: float, world: int) -> tuple[float, list[list[torch.Tensor]]]:
    every = [_shards(r, scale) for r in range(world)]
    total = torch.sqrt(sum(g.double().pow(2).sum() for s in every for g in s)).item()
    return total, every


def check(ctx, fn) -> Verdict:
    n = ctx.world_size
    for name, scale, max_norm in CASES:
        grads = _shards(ctx.rank, scale)
        got = fn(grads, max_norm, ctx.group)
        total, every = _global(scale, n)
        want = [g * min(1.0, max_norm / total) for g in every[ctx.rank]]
        problem = None
        if not isinstance(got, (float, int)) and not (
            isinstance(got, torch.Tensor) and got.numel() == 1
        ):
            problem = f"{name}: return the global norm as a float, got {type(got).__name__}"
        elif abs(float(got) - total) > 1e-5 * total:
            problem = f"{name}: norm {float(got):.5g}, expected {total:.5g}. " + _why(
                float(got), total, n, every, ctx.rank
            )
        elif not all(torch.allclose(g, w, rtol=1e-5, atol=1e-7) for g, w in zip(grads, want)):
            problem = f"{name}: the norm is right but the shards were scaled wrong" + (
                ": clip only when the norm exceeds max_norm"
                if total <= max_norm
                else ": every shard is scaled by max_norm / global norm"
            )
        failed = torch.tensor([float(problem is not None)])
        dist.all_reduce(failed, op=dist.ReduceOp.MAX, group=ctx.group)
        if failed.item():
            return Verdict.fail(problem) if problem else Verdict.ok(f"{name}: right here")
    return Verdict.ok(
        "one global norm, the same factor on every shard, and no clipping below max_norm"
    )


def _why(got: float, total: float, n: int, every, rank: int) -> str:
    local = torch.sqrt(sum(g.double().pow(2).sum() for g in every[rank])).item()
    norms = sum(torch.sqrt(sum(g.double().pow(2).sum() for g in s)).item() for s in every)
    if abs(got - local) <= 1e-5 * local:
        return (
            "That is this rank's own shard norm: each rank would clip by a different "
            "factor; all-reduce the squared norms over the group"
        )
    if abs(got - norms) <= 1e-5 * norms:
        return "Norms do not add: all-reduce the SQUARES (sum of g^2), then take the root"
    if abs(got - total / n**0.5) <= 1e-5 * total:
        return "ReduceOp.AVG divided by the group size: the squares must be SUMMED"
    return "The global norm is sqrt(sum of g^2 over every shard of every rank)"


register(
    Exercise(
        name="global_grad_clip",
        lab="14_correctness",
        summary="clip sharded gradients by the norm of the WHOLE gradient",
        signature="fn(grads: list[Tensor], max_norm: float, group) -> float",
        check=check,
        reference=global_grad_clip,
        wrong={
            "local norm": wrong_local_norm,
            "sum of norms": wrong_sum_of_norms,
            "average of squares": wrong_average_of_squares,
            "rescales below max_norm": wrong_always_rescales,
        },
        world_size=4,
        timeout_s=30.0,
        hint="what adds up across shards: norms, or squared norms? and when does clipping act?",
        solution_helpers=(clip_to,),
    )
)
