"""Lab 04's experiments: data parallelism on real ranks, one small launch per section.

    train_step(ddp, opt, x, y, span)        the training step every experiment runs (shown in the
    lab)
    uneven_epoch(ctx, n_samples, batch)     3: hand-made uneven shards: the job hangs
    exactness(ctx, cfg, batch, steps)       4a: losses and step-0 gradients, float32 and float64
    bytes_per_step(ctx, cfg, batch)         4b: one step's all-reduces: ledger and wire bytes
    step_timeline(ctx, cfg, batch, cap)     4c: a measured timeline of one step
    step_times(ctx, cfg, batch, steps, ..)  4d: wall and CPU time per step, and a bucket-size sweep
    overlap_fraction(events, rank)          4c: share of all-reduce time inside backward
Sections 5-8 (buffers, SyncBatchNorm, no_sync, hooks, asynchronous SGD): details.py.

Every function runs on every rank (``lab_utils.run(fn, N, ...)``) and returns small dataclasses.
Implementations: "naive" (NaiveDDP), "bucket" (BucketDDP), "torch" (DistributedDataParallel).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from lab_utils.data import regression_batches
from lab_utils.experiments.common import mean_over_ranks, no_span, rank_batches, sgd_step
from lab_utils.models import GPTConfig, TinyGPT, ToyMLP, lm_loss
from lab_utils.parallel.data_parallel import BucketDDP, NaiveDDP
from lab_utils.reference import default_loss, make_optimizer

IMPLS = ("naive", "bucket", "torch")
LR = 1e-2  # AdamW, as the single-process reference (reference.reference_losses) uses


@dataclass
class DDPRun:
    """What one implementation did on this rank (fields a given experiment does not fill stay
    empty).

    losses:     global-batch loss per step (mean over ranks of the per-rank mean losses)
    grads:      {parameter name: averaged gradient after the measured step}
    comm_count: all-reduces the CommLedger saw in the measured step
    comm_bytes: ledger bytes: the ring formula applied to the all-reduced tensors' sizes
    wire_bytes: bytes this rank's sockets really sent during the step (WireMeter; None if unknown)
    events:     measured timeline of one step (gathered on rank 0: every rank's spans)
    step_s, cpu_s: wall-clock and this process's CPU seconds per timed step
    """

    impl: str
    losses: list[float] = field(default_factory=list)
    grads: dict[str, torch.Tensor] = field(default_factory=dict)
    comm_count: int = 0
    comm_bytes: float = 0.0
    wire_bytes: int | None = None
    events: list[dict] | None = None
    step_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)


def make_ddp(impl: str, model: nn.Module, bucket_cap_bytes: int = 25 * 2**20) -> nn.Module:
    """Wrap ``model`` in one of the three implementations (same bucket size for ours and
    torch's)."""
    if impl == "naive":
        return NaiveDDP(model)
    if impl == "bucket":
        return BucketDDP(model, bucket_cap_bytes=bucket_cap_bytes)
    if impl == "torch":
        return DistributedDataParallel(model, bucket_cap_mb=bucket_cap_bytes / 2**20)
    raise ValueError(f"unknown implementation {impl!r}; choose one of {IMPLS}")


def sync_gradients(ddp: nn.Module) -> None:
    """Our classes all-reduce (naive) or wait for the bucket all-reduces (bucketed) here; torch
    DDP has already done both inside backward."""
    if not isinstance(ddp, DistributedDataParallel):
        ddp.finish_gradient_synchronization()


def train_step(
    ddp: nn.Module,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    span: Callable[[str], Any] = no_span,
) -> float:
    opt.zero_grad(set_to_none=True)
    with span("forward"):
        loss = lm_loss(ddp(x), y)
    with span("backward"):
        loss.backward()  # bucketed and torch DDP: all-reduces launch in here
    with span("wait"):
        sync_gradients(ddp)  # naive: all the communication happens here
    with span("optimizer"):
        opt.step()
    return loss.item()


# --- section 3: the hang --------------------------------------------------------------------


def uneven_epoch(ctx: Any, n_samples: int, batch_size: int) -> int:
    """Rank r takes samples r, r+N, ... by hand, WITHOUT padding: with 5 samples on 2 ranks and
    batches of 2, rank 0 has 2 steps and rank 1 one step, so rank 0 waits in its second step's
    gradient all-reduce for a partner that never comes. Returns the number of steps (if ever)."""
    x_all, y_all = regression_batches(1, n_samples, seed=0)[0]
    mine = list(range(ctx.rank, n_samples, ctx.world_size))  # rank r: samples r, r+N, ...
    ddp = BucketDDP(ToyMLP(seed=0))
    n_steps = math.ceil(len(mine) / batch_size)
    for step in range(n_steps):
        idx = mine[step * batch_size : (step + 1) * batch_size]
        ddp.zero_grad()
        default_loss(ddp(x_all[idx]), y_all[idx]).backward()  # launches the async all-reduce
        print(f"step {step}: waiting for the gradient all-reduce", flush=True)
        ddp.finish_gradient_synchronization()  # the rendezvous: wait for every rank's part
        sgd_step(ddp, lr=0.1)
    return n_steps


# --- section 4: the three implementations side by side ---------------------------------------


def exactness(
    ctx: Any,
    cfg: GPTConfig,
    batch_per_rank: int,
    steps: int,
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64),
) -> dict[tuple[str, str], DDPRun]:
    """Train each implementation ``steps`` AdamW steps from TinyGPT(seed=0) on this rank's shards,
    in each dtype. Returns {(impl, dtype name): DDPRun(losses, grads of step 0)}."""
    out = {}
    shards = rank_batches(ctx, cfg, batch_per_rank, steps)
    for dtype in dtypes:
        for impl in IMPLS:
            ddp = make_ddp(impl, TinyGPT(cfg, seed=0).to(dtype))
            opt = make_optimizer(ddp.parameters(), "adamw", LR)
            run = DDPRun(impl)
            for i, (x, y) in enumerate(shards):
                run.losses.append(train_step(ddp, opt, x, y))
                if i == 0:  # the averaged gradient of the first global batch, before any update
                    run.grads = {n: p.grad.clone() for n, p in ddp.module.named_parameters()}
            run.losses = mean_over_ranks(run.losses, ctx.group)
            out[impl, str(dtype).removeprefix("torch.")] = run
    return out


def bytes_per_step(
    ctx: Any, cfg: GPTConfig, batch_per_rank: int, bucket_cap_bytes: int = 64 * 2**10
) -> dict[str, DDPRun]:
    """One warm-up step, then one step inside a CommLedger and a WireMeter, per implementation.
    Returns {impl: DDPRun(comm_count, comm_bytes (ledger), wire_bytes)}."""
    from lab_utils.measure import CommLedger, WireMeter

    out = {}
    shards = rank_batches(ctx, cfg, batch_per_rank, 2)
    for impl in IMPLS:
        ddp = make_ddp(impl, TinyGPT(cfg, seed=0), bucket_cap_bytes)
        opt = make_optimizer(ddp.parameters(), "adamw", LR)
        train_step(ddp, opt, *shards[0])  # torch DDP rebuilds its buckets after step 0
        dist.barrier(group=ctx.group)  # no other rank's set-up traffic inside the block
        with CommLedger() as ledger, WireMeter(ctx) as wire:
            train_step(ddp, opt, *shards[1])
        out[impl] = DDPRun(
            impl,
            comm_count=ledger.count("all_reduce"),
            comm_bytes=ledger.bytes_sent("all_reduce"),
            wire_bytes=wire.sent,
        )
    return out


def step_timeline(
    ctx: Any, cfg: GPTConfig, batch_per_rank: int, bucket_cap_bytes: int
) -> dict[str, list[dict] | None]:
    """One warm-up step, then one step under a Timeline (forward, backward, wait, optimizer
    spans) with every all-reduce's launch-to-completion span from a CommLedger.
    Returns {impl: events} on rank 0 (every rank's spans), {impl: None} elsewhere."""
    from lab_utils.measure import CommLedger, Timeline

    out = {}
    shards = rank_batches(ctx, cfg, batch_per_rank, 2)
    for impl in IMPLS:
        ddp = make_ddp(impl, TinyGPT(cfg, seed=0), bucket_cap_bytes)
        opt = make_optimizer(ddp.parameters(), "adamw", LR)
        train_step(ddp, opt, *shards[0])
        tl = Timeline(ctx)
        t0 = time.perf_counter() - tl.now()  # Timeline's origin on the perf_counter clock
        with CommLedger() as ledger:
            train_step(ddp, opt, *shards[1], span=tl.span)
        for r in ledger.records:  # CommLedger stamps records with perf_counter()
            tl.add("all_reduce", r.start_s - t0, r.start_s - t0 + r.duration_s)
        out[impl] = tl.gather()
    return out


@dataclass
class SweepPoint:
    """BucketDDP at one bucket cap: how many buckets, and the time of each timed step."""

    cap_bytes: int
    buckets: int
    step_s: list[float]


def _timed_step(
    ctx: Any, ddp: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> tuple[float, float]:
    dist.barrier(group=ctx.group)  # every rank starts together
    wall, cpu = time.perf_counter(), time.process_time()
    train_step(ddp, opt, x, y)
    return time.perf_counter() - wall, time.process_time() - cpu


def step_times(
    ctx: Any,
    cfg: GPTConfig,
    batch_per_rank: int,
    steps: int,
    bucket_cap_bytes: int,
    sweep_caps: list[int],
    sweep_steps: int,
) -> tuple[dict[str, DDPRun], list[SweepPoint]]:
    """Wall and CPU time per step of the three implementations, interleaved step by step (a busy
    moment of the machine hits all three), after one warm-up step; then BucketDDP's step time
    at each bucket cap in ``sweep_caps``."""
    shards = rank_batches(ctx, cfg, batch_per_rank, steps + 1)
    ddps = {impl: make_ddp(impl, TinyGPT(cfg, seed=0), bucket_cap_bytes) for impl in IMPLS}
    opts = {impl: make_optimizer(d.parameters(), "adamw", LR) for impl, d in ddps.items()}
    runs = {impl: DDPRun(impl) for impl in IMPLS}
    for i, (x, y) in enumerate(shards):
        for impl in IMPLS:
            if i == 0:
                train_step(ddps[impl], opts[impl], x, y)  # warm-up
                continue
            wall, cpu = _timed_step(ctx, ddps[impl], opts[impl], x, y)
            runs[impl].step_s.append(wall)
            runs[impl].cpu_s.append(cpu)
    sweep = []
    for cap in sweep_caps:
        ddp = BucketDDP(TinyGPT(cfg, seed=0), bucket_cap_bytes=cap)
        opt = make_optimizer(ddp.parameters(), "adamw", LR)
        train_step(ddp, opt, *shards[0])  # warm-up
        times = [_timed_step(ctx, ddp, opt, x, y)[0] for x, y in shards[1 : sweep_steps + 1]]
        sweep.append(SweepPoint(cap, len(ddp.buckets), times))
    return runs, sweep


def overlap_fraction(events: list[dict], rank: int) -> float:
    """Share of this rank's all-reduce time that falls inside its backward span (0: none)."""
    bwd = [e for e in events if e["rank"] == rank and e["name"] == "backward"][0]
    comm = [e for e in events if e["rank"] == rank and e["name"] == "all_reduce"]
    inside = sum(max(0.0, min(e["end"], bwd["end"]) - max(e["start"], bwd["start"])) for e in comm)
    return inside / max(1e-12, sum(e["end"] - e["start"] for e in comm))
