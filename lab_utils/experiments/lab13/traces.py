"""Section 1-2 of lab 13: profile a data-parallel step on every rank, ours and torch's.

    ddp_traces(ctx, folder, cfg, batch, steps, cap)   one trace file per rank and implementation
                                                      ("bucket": our BucketDDP, "torch": torch
                                                      DDP), and our OWN spans of the last step
                                                      (Timeline + CommLedger, as lab 04 draws)
    fsdp_traces(ctx, folder, cfg, batch, steps)       the same for sharded data parallelism: our
                                                      FSDP and FSDP2, each with prefetch off / on
    pipeline_trace(ctx, folder, schedule, m)          one pipeline schedule of lab 07
The own-span overlap fraction (lab04.overlap_fraction: all-reduce time inside backward) is the
number the trace's reading (lab_utils.profiling.read) is compared with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from lab_utils.experiments.common import rank_batches
from lab_utils.experiments.lab04 import LR, make_ddp, overlap_fraction, train_step
from lab_utils.models import GPTConfig, TinyGPT, lm_loss
from lab_utils.profiling import profiled_steps
from lab_utils.reference import make_optimizer

IMPLS = ("bucket", "torch")


@dataclass
class TracedRun:
    impl: str
    paths: list[str]  # every rank's trace file (filled on rank 0)
    own_overlap: float | None  # lab 04's reading of our own spans (rank 0's last step)


def ddp_traces(
    ctx: Any, folder: str, cfg: GPTConfig, batch_per_rank: int, steps: int, bucket_cap_bytes: int
) -> dict[str, TracedRun]:
    from lab_utils.measure import CommLedger, Timeline

    shards = rank_batches(ctx, cfg, batch_per_rank, steps + 2)
    out = {}
    for impl in IMPLS:
        ddp = make_ddp(impl, TinyGPT(cfg, seed=0), bucket_cap_bytes)
        opt = make_optimizer(ddp.parameters(), "adamw", LR)
        tl, ledger = Timeline(ctx), CommLedger()
        t0 = time.perf_counter() - tl.now()

        def step(i: int) -> None:
            if i < steps + 1:
                train_step(ddp, opt, *shards[i])
                return
            with ledger:  # the last step: our own spans as well
                train_step(ddp, opt, *shards[i], span=tl.span)
            for r in ledger.records:
                tl.add("all_reduce", r.start_s - t0, r.start_s - t0 + r.duration_s)

        path = profiled_steps(ctx.rank, folder, impl, step, steps, warmup=1)
        events = tl.gather()
        paths = _gather_paths(ctx, path)
        own = overlap_fraction(events, 0) if events else None
        out[impl] = TracedRun(impl, paths, own)
    return out


def _gather_paths(ctx: Any, path: str) -> list[str]:
    import torch.distributed as dist

    paths: list = [None] * ctx.world_size
    dist.all_gather_object(paths, path, group=ctx.group)
    return paths


# --- sharded data parallelism: the same reading for FSDP (ours) and FSDP2, prefetch off / on ---
FSDP_VARIANTS = ("ours", "ours prefetch", "FSDP2", "FSDP2 prefetch")


def _sharded(variant: str, cfg: GPTConfig, group: Any) -> torch.nn.Module:
    """Our FSDP (prefetch = all-gather the next unit while this one computes), or FSDP2 with
    explicit prefetch lists: the next block in forward, the previous one in backward (on) or
    none at all (off)."""
    from lab_utils.experiments.lab05.sharding import apply_fully_shard
    from lab_utils.parallel.fsdp import FSDP

    model = TinyGPT(cfg, seed=0)
    if variant.startswith("ours"):
        return FSDP(model, group, prefetch=variant.endswith("prefetch"))
    apply_fully_shard(model, group)
    blocks = list(model.blocks)
    on = variant.endswith("prefetch")
    for i, block in enumerate(blocks):
        block.set_modules_to_forward_prefetch(blocks[i + 1 : i + 2] if on else [])
        block.set_modules_to_backward_prefetch(blocks[i - 1 : i] if on and i else [])
    return model


def fsdp_traces(
    ctx: Any, folder: str, cfg: GPTConfig, batch_per_rank: int, steps: int
) -> dict[str, list[str]]:
    """One trace file per rank for each of FSDP_VARIANTS (AdamW, one warm-up step);
    {variant: every rank's path}."""
    shards = rank_batches(ctx, cfg, batch_per_rank, steps + 2)
    out = {}
    for variant in FSDP_VARIANTS:
        model = _sharded(variant, cfg, ctx.group)
        opt = make_optimizer(model.parameters(), "adamw", LR)  # over the shards

        def step(i: int) -> None:
            opt.zero_grad(set_to_none=False)
            lm_loss(model(shards[i][0]), shards[i][1]).backward()
            opt.step()

        path = profiled_steps(ctx.rank, folder, variant.replace(" ", "_"), step, steps)
        out[variant] = _gather_paths(ctx, path)
    return out


# --- one pipeline schedule: idle per rank from the trace, beside the bubble formula ---------
def pipeline_trace(ctx: Any, folder: str, schedule: str, m: int) -> list[str]:
    """Lab 07's pipeline step (``schedule`` over ``m`` micro-batches, one stage per rank),
    profiled on every rank; every rank's path. The profiled window also holds the step's set-up
    (the stages cut from a fresh model, a barrier), which counts as compute and comm."""
    from lab_utils.experiments.lab07.pipeline import pipeline_step

    def step(i: int) -> None:
        pipeline_step(ctx, schedule=schedule, m=m)

    return _gather_paths(ctx, profiled_steps(ctx.rank, folder, f"pp_{schedule}", step, 1))
