"""Lab 04 on the emulated cluster (section 4d): step time vs bucket size, on a GPU cluster's clock.

The same BucketDDP and torch DDP the lab races on this machine run here on ``lab_utils.twin``'s
emulated cluster: real gradients through gloo, time from the cluster's virtual clock. Each bucket
cap gets a warm-up step, then one step between two ``twin.step()`` marks; the emulated clock is
deterministic, so one measured step is the step time (no medians, no noise).

    bucket_sweep   the rank worker: (impl, cap) -> the measured step's emulated window
    sweep_points   the run -> one BucketStep per (impl, cap): step time, all-reduces, overlap
    step_window    one step of the run, cut out as an Emulation for ``twin.figure``
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab_utils import twin
from lab_utils.data import shard_for_rank, token_batches
from lab_utils.experiments.common import emulated_window
from lab_utils.experiments.lab04 import LR, make_ddp, train_step
from lab_utils.models import GPTConfig, TinyGPT
from lab_utils.reference import make_optimizer

SWEEP_IMPLS = ("bucket", "torch")
LOSS_BYTES = 64  # all-reduces at most this big average the loss, not gradients


@dataclass
class BucketStep:
    """One implementation at one bucket cap, on the emulated clock (seconds)."""

    impl: str
    cap_bytes: int
    step_s: float  # the measured step, slowest rank
    all_reduces: int  # gradient all-reduces in that step on rank 0 (one per bucket)
    compute_s: float  # rank 0's compute stream, busy
    comm_s: float  # rank 0's communication stream, busy
    hidden_s: float  # rank 0's communication that ran under its compute


def bucket_sweep(
    ctx: Any, cfg: GPTConfig, batch_per_rank: int, caps: list[int], impls: tuple = SWEEP_IMPLS
) -> list[tuple[str, int, float, float]]:
    """For each impl and cap: a warm-up step (torch DDP rebuilds its buckets there), then one
    step between two ``twin.step()`` marks. Returns [(impl, cap, start, end)] on this rank's
    emulated clock (Nones outside an emulated run)."""
    n = ctx.world_size
    shards = [
        shard_for_rank(b, ctx.rank, n)  # this rank's rows of two global batches
        for b in token_batches(2, batch_per_rank * n, cfg.seq_len, cfg.vocab_size, seed=1)
    ]
    marks = []
    for impl in impls:
        for cap in caps:
            ddp = make_ddp(impl, TinyGPT(cfg, seed=0), cap)
            opt = make_optimizer(ddp.parameters(), "adamw", LR)
            train_step(ddp, opt, *shards[0])
            start = twin.step()
            train_step(ddp, opt, *shards[1])
            marks.append((impl, cap, start, twin.step()))
    return marks


def step_window(em: twin.Emulation, i: int) -> twin.Emulation:
    """The ``i``-th measured step of a ``bucket_sweep`` run as an Emulation of its own: each
    rank's spans inside its window, shifted to start at 0 (what ``twin.figure`` draws)."""
    return emulated_window(em, [rec.result[i][2:] for rec in em.records])


def sweep_points(em: twin.Emulation) -> list[BucketStep]:
    """One BucketStep per measured step of a ``bucket_sweep`` run, in its order."""
    out = []
    for i, (impl, cap, _, _) in enumerate(em.results[0]):
        one = step_window(em, i)
        spans = one.records[0].spans
        grads = [s for s in spans if s["stream"] == "comm" and s["bytes"] > LOSS_BYTES]
        out.append(
            BucketStep(
                impl,
                cap,
                max(one.step_times()),
                len(grads),
                one.busy(0, "compute"),
                one.busy(0, "comm"),
                one.overlap(0),
            )
        )
    return out
