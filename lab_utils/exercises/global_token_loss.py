"""Exercise "global_token_loss" (lab 14): the loss of a padded, uneven batch under data parallelism.

Each rank holds a different number of REAL tokens (the rest is padding, mask False). The loss the
job means is the mean cross-entropy over every real token of the GLOBAL batch. Gradients are then
AVERAGED over the group, as DDP does. The learner writes this rank's loss:

    fn(logits (B, T, V), targets (B, T), mask (B, T) bool, group) -> scalar tensor

so that the averaged gradients equal the global mean's. The per-rank mean (the bug fixed in
torchtitan PR #2206 and open-instruct #1728) weighs a rank with few real tokens as much as one
with many; it is right only when every rank happens to hold the same number of real tokens.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils.exercises._core import Exercise, Verdict, register

C, V, B, T = 6, 8, 2, 5  # features, vocabulary, rows and tokens per rank


def global_token_loss(logits, targets, mask, group) -> torch.Tensor:
    """This rank's SUM over its real tokens, divided by the global count of real tokens (one
    all-reduce of an integer), times the group size: DDP's average divides by it again."""
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")  # (B*T,)
    local_sum = (ce * mask.flatten()).sum()
    count = mask.sum().reshape(1)
    dist.all_reduce(count, group=group)  # real tokens on every rank of the group
    return local_sum / count * dist.get_world_size(group)


# ----------------------------------------------------------------------------- wrong versions
def wrong_per_rank_mean(logits, targets, mask, group) -> torch.Tensor:
    """The mean over this rank's real tokens: every rank weighs the same, whatever it holds."""
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    return (ce * mask.flatten()).sum() / mask.sum()


def wrong_no_group_factor(logits, targets, mask, group) -> torch.Tensor:
    """The global count, but DDP's average then divides by the group size once more."""
    return global_token_loss(logits, targets, mask, group) / dist.get_world_size(group)


def wrong_counts_padding(logits, targets, mask, group) -> torch.Tensor:
    """Divides by every position, padding included (a plain .mean() after masking)."""
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    return (ce * mask.flatten()).mean()


# ----------------------------------------------------------------------------- the grader
def _data(rank: int, real: int):
    """Rank ``rank``'s features, targets and mask: ``real`` real tokens, then padding."""
    g = torch.Generator().manual_seed(40 + rank)
    x = torch.randn(B, T, C, generator=g, dtype=torch.float64)
    y = torch.randint(V, (B, T), generator=g)
    mask = (torch.arange(B * T) < real).view(B, T)
    return x, y, mask


def _grad(weight: torch.Tensor, losses) -> torch.Tensor:
    w = weight.detach().clone().requires_grad_()
    sum(loss(w) for loss in losses).backward()
    return w.grad


def _expected(weight, reals, rank_losses) -> torch.Tensor:
    """The averaged gradient that a rank-loss rule gives, computed in one process."""
    n = len(reals)
    return _grad(weight, [lambda w, r=r: rank_losses(w, *_data(r, reals[r])) / n for r in range(n)])


def _ce(w, x, y, mask):
    return F.cross_entropy((x @ w).flatten(0, 1), y.flatten(), reduction="none") * mask.flatten()


CASES = (
    ("uneven padding: 10, 7, 3 and 1 real tokens", (10, 7, 3, 1)),
    ("a rank with padding only: 10, 0, 4, 6 real tokens", (10, 0, 4, 6)),
)


def _why(got, weight, reals) -> str:
    total, n = sum(reals), len(reals)
    named = [
        (
            "per-rank mean: each rank divides by its OWN count of real tokens, so a rank's few "
            "tokens weigh as much as another's many (divide by the GLOBAL count: all-reduce it)",
            lambda w, *d: _ce(w, *d).sum() / max(int(d[2].sum()), 1),
        ),
        (
            "the gradient is group-size times too small: DDP's average divides by the group size "
            "AGAIN after your global normalisation; multiply by the group size",
            lambda w, *d: _ce(w, *d).sum() / total,
        ),
    ]
    padded = (
        "the padding was counted: divide by the number of REAL tokens (mask.sum()), not "
        "by every position"
    )
    named += [
        (padded, lambda w, *d: _ce(w, *d).mean()),
        (padded, lambda w, *d: _ce(w, *d).mean() * n),
    ]
    for message, rule in named:
        if torch.allclose(got, _expected(weight, reals, rule), rtol=1e-6, atol=1e-12):
            return message
    return (
        "it matches no rule we know: the averaged gradient must equal the gradient of "
        "(sum of CE over real tokens, all ranks) / (real tokens, all ranks)"
    )


def check(ctx, fn) -> Verdict:
    weight = torch.randn(C, V, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    for name, reals in CASES:
        x, y, mask = _data(ctx.rank, reals[ctx.rank])
        w = weight.clone().requires_grad_()
        loss = fn(x @ w, y, mask, ctx.group)
        problem = None
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
            problem = f"{name}: return a scalar tensor that autograd can differentiate"
        else:
            loss.backward()
            got = w.grad.clone()
            dist.all_reduce(got, op=dist.ReduceOp.AVG, group=ctx.group)  # what DDP does
            want = _expected(
                weight, reals, lambda w_, *d: _ce(w_, *d).sum() / sum(reals) * len(reals)
            )
            if not torch.isfinite(got).all():
                problem = (
                    f"{name}: the gradient is not finite: a rank with no real token "
                    "divided 0 by 0 (a per-rank mean)"
                )
            elif not torch.allclose(got, want, rtol=1e-6, atol=1e-12):
                problem = f"{name}: averaged gradient wrong. {_why(got, weight, reals)}"
        failed = torch.tensor([float(problem is not None)])
        dist.all_reduce(failed, op=dist.ReduceOp.MAX, group=ctx.group)
        if failed.item():
            return Verdict.fail(problem) if problem else Verdict.ok(f"{name}: right here")
    return Verdict.ok(
        "the averaged gradients equal the global token mean's (uneven padding, "
        "and a rank with padding only)"
    )


register(
    Exercise(
        name="global_token_loss",
        lab="14_correctness",
        summary="this rank's loss so that DDP-averaged gradients are the global token mean's",
        signature="fn(logits, targets, mask, group) -> scalar tensor",
        check=check,
        reference=global_token_loss,
        wrong={
            "per-rank mean": wrong_per_rank_mean,
            "global count without the group-size factor": wrong_no_group_factor,
            "padding counted": wrong_counts_padding,
        },
        world_size=4,
        timeout_s=30.0,
        hint="the denominator is ONE number for the whole group; and remember what DDP does to "
        "the gradients after your loss is differentiated",
    )
)
