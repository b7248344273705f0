"""Lab 14's experiments beside the matrix and the zoo: what a real job should log, and what
resuming on a different number of ranks does to the data.

    health_log(ctx, variants, steps)   data-parallel TinyGPT on every rank of the launch, per
                                       step and per rank: the loss, the real tokens of the
                                       global batch, the gradient norm after the sync, a
                                       fingerprint of the weights, the collectives called
    resume_coverage(...)               pure: which samples a resumed epoch repeats or skips
                                       when the world size changes (DistributedSampler)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

from lab_utils.correctness.matrix import BATCH, CFG, LR, batches
from lab_utils.data import shard_for_rank
from lab_utils.experiments.common import sgd_step
from lab_utils.measure import CommLedger
from lab_utils.models import TinyGPT, lm_loss
from lab_utils.parallel.collectives import all_reduce_flat

VARIANTS = ("correct", "sum", "rank 1 skips the sync")


@dataclass
class HealthRow:
    """One rank, one step: what a job can log for the price of a few numbers."""

    variant: str
    step: int
    rank: int
    loss: float  # this rank's mean loss (its shard)
    tokens: int  # real tokens of the GLOBAL batch, as this rank counted them (all-reduce)
    grad_norm: float  # the full gradient's norm after the sync, on this rank
    weights: str  # a fingerprint of the weights after the step (replicas must agree bitwise)
    collectives: int  # collectives this rank called in the step


def fingerprint(model: torch.nn.Module) -> str:
    """8 hex digits of a hash of every parameter's bytes: equal iff bitwise equal."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:8]


def _step(
    ctx: Any, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, variant: str
) -> tuple[float, int]:
    """One data-parallel step; returns (this rank's loss, global real tokens)."""
    tokens = torch.tensor([y.numel()])
    dist.all_reduce(tokens, group=ctx.group)  # every token is real here; a padded batch counts
    loss = lm_loss(model(x), y)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    if variant == "sum":
        all_reduce_flat(grads, dist.ReduceOp.SUM, ctx.group)
    elif variant == "correct" or ctx.rank != 1:
        all_reduce_flat(grads, dist.ReduceOp.AVG, ctx.group)
    else:  # rank 1 forgot: it must still call the collectives the others wait in, so it
        all_reduce_flat([torch.zeros_like(g) for g in grads], dist.ReduceOp.AVG, ctx.group)
    return loss.item(), int(tokens.item())


def health_log(ctx: Any, variants: tuple[str, ...] = VARIANTS, steps: int = 3) -> list[HealthRow]:
    """Each variant trains ``steps`` SGD steps of data-parallel TinyGPT on every rank."""
    rows = []
    for variant in variants:
        model = TinyGPT(CFG, seed=0)
        for step, batch in enumerate(batches(steps)):
            x, y = shard_for_rank(batch, ctx.rank, ctx.world_size)
            with CommLedger() as ledger:
                loss, tokens = _step(ctx, model, x, y, variant)
            norm = torch.sqrt(sum(p.grad.double().pow(2).sum() for p in model.parameters()))
            sgd_step(model, LR)
            rows.append(
                HealthRow(
                    variant,
                    step,
                    ctx.rank,
                    loss,
                    tokens,
                    norm.item(),
                    fingerprint(model),
                    len(ledger.records),
                )
            )
    return rows


def agreement(rows: list[HealthRow]) -> list[dict]:
    """Per variant and step: do the ranks agree (grad norm, weights), the mean loss, and the
    global token count against the expected B*T."""
    out = []
    for variant in dict.fromkeys(r.variant for r in rows):
        for step in sorted({r.step for r in rows if r.variant == variant}):
            mine = [r for r in rows if (r.variant, r.step) == (variant, step)]
            out.append(
                {
                    "variant": variant,
                    "step": step,
                    "mean loss": sum(r.loss for r in mine) / len(mine),
                    "tokens": mine[0].tokens,
                    "expected tokens": BATCH * CFG.seq_len,
                    "grad norms agree": len({r.grad_norm for r in mine}) == 1,
                    "grad norm (rank 0)": mine[0].grad_norm,
                    "weights agree": len({r.weights for r in mine}) == 1,
                    "collectives per rank": sorted({r.collectives for r in mine}),
                }
            )
    return out


def resume_coverage(
    n_samples: int, per_rank: int, world_before: int, steps_before: int, world_after: int
) -> dict[str, int]:
    """One epoch of ``n_samples`` (no shuffle), ``per_rank`` samples per rank per step.
    ``steps_before`` steps on ``world_before`` ranks, then a restart on ``world_after``:

        naive     a new DistributedSampler for the new world, each rank skipping the
                  steps_before * per_rank samples it "already did" (resume by step count)
        by count  skip the samples CONSUMED, steps_before * per_rank * world_before, then
                  shard the rest over the new world

    Returns the samples each way sees twice and never, for the epoch."""

    def shard(world: int, rank: int) -> list[int]:
        return list(
            DistributedSampler(range(n_samples), world, rank, shuffle=False, drop_last=True)
        )

    done = steps_before * per_rank  # samples each old rank had consumed
    before = [i for r in range(world_before) for i in shard(world_before, r)[:done]]
    naive = before + [i for r in range(world_after) for i in shard(world_after, r)[done:]]
    rest = sorted(set(range(n_samples)) - set(before))
    by_count = before + rest[: len(rest) - len(rest) % world_after]
    out = {}
    for name, seen in (("naive", naive), ("by count", by_count)):
        out[f"{name}: seen twice"] = len(seen) - len(set(seen))
        out[f"{name}: never seen"] = n_samples - len(set(seen))
    out["consumed before the restart"] = len(before)
    return out
