"""Lab 04's later experiments: the details that bite, communication hooks, asynchronous SGD.

    buffers_follow_rank0(ctx)               5a: eval outputs with and without broadcast_buffers
    syncbn_grads(ctx)                       5b: BatchNorm vs SyncBatchNorm1d gradients
    accumulation(ctx, accum)                5c: K micro-batches with and without no_sync
    balanced_epoch(ctx)                     5d: the uneven loop of section 3 through
    DistributedSampler
    comm_hooks(ctx, cfg, batch, steps)      6: torch DDP communication hooks: wire bytes and losses
    powersgd_floats(model, rank)            6: the numbers PowerSGD all-reduces per step (formula)
    stale_sgd(k, steps)                     8: asynchronous SGD simulated in one process

Rank workers run on every rank (``lab_utils.run``) and return small dataclasses; stale_sgd runs
in the notebook's own process. The shared pieces (DDPRun, train_step) are in ddp.py.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from lab_utils.data import regression_batches, shard_for_rank
from lab_utils.experiments.common import mean_over_ranks, rank_batches, sgd_step
from lab_utils.experiments.lab04.ddp import LR, DDPRun, train_step
from lab_utils.models import GPTConfig, TinyGPT, ToyMLP
from lab_utils.parallel.data_parallel import BucketDDP, NaiveDDP, SyncBatchNorm1d
from lab_utils.reference import default_loss, make_optimizer

# --- section 5: buffers, SyncBatchNorm, no_sync, the balanced epoch -------------------------


def buffers_follow_rank0(ctx: Any) -> dict[bool, torch.Tensor]:
    """BucketDDP over a ToyMLP with BatchNorm, 3 SGD steps on 2 samples per rank, then eval of
    one fixed input. Returns {broadcast_buffers: this rank's eval output}."""
    n, out = ctx.world_size, {}
    batches = regression_batches(3, 2 * n, seed=4)
    for bcast in (True, False):
        ddp = BucketDDP(ToyMLP(seed=0, batchnorm=True), broadcast_buffers=bcast)
        for b in batches:
            x, y = shard_for_rank(b, ctx.rank, n)
            ddp.zero_grad()
            default_loss(ddp(x), y).backward()
            ddp.finish_gradient_synchronization()
            sgd_step(ddp, lr=0.1)
        ddp.eval()
        with torch.no_grad():
            out[bcast] = ddp(batches[0][0])  # eval: running stats, no update
    return out


@dataclass
class SyncBNResult:
    torch_syncbn: str  # what torch.nn.SyncBatchNorm does on a CPU rank
    grads: dict[bool, dict[str, torch.Tensor]]  # {synchronised?: averaged gradients}


def syncbn_grads(ctx: Any) -> SyncBNResult:
    """One step of NaiveDDP over ToyMLP(batchnorm=True) with 2 samples per rank, with the plain
    BatchNorm1d and with SyncBatchNorm1d; the gradients, to compare with one process."""
    try:  # torch's own, on CPU ranks
        nn.SyncBatchNorm(4)(torch.randn(3, 4))
        torch_syncbn = "ran"
    except ValueError as e:
        torch_syncbn = f"ValueError: {e}"
    batch = regression_batches(3, 2 * ctx.world_size, seed=4)[0]
    grads = {}
    for sync_bn in (False, True):
        model = ToyMLP(seed=0, batchnorm=True)
        if sync_bn:
            model.net[1] = SyncBatchNorm1d(model.net[1])
        ddp = NaiveDDP(model)
        x, y = shard_for_rank(batch, ctx.rank, ctx.world_size)
        default_loss(ddp(x), y).backward()
        ddp.finish_gradient_synchronization()
        # SyncBatchNorm1d wraps the BatchNorm as .bn: strip that from the names
        grads[sync_bn] = {
            n.replace(".bn.", "."): p.grad.clone() for n, p in model.named_parameters()
        }
    return SyncBNResult(torch_syncbn, grads)


def accumulation(ctx: Any, accum: int) -> dict[bool, DDPRun]:
    """``accum`` micro-batches of a ToyMLP through BucketDDP, with and without no_sync() on the
    first accum-1; the whole accumulation inside a CommLedger and a WireMeter.
    Returns {no_sync used?: DDPRun(comm_count, comm_bytes, wire_bytes, grads)}."""
    from lab_utils.measure import CommLedger, WireMeter

    xb, yb = shard_for_rank(
        regression_batches(1, 8 * ctx.world_size, seed=5)[0], ctx.rank, ctx.world_size
    )
    out = {}
    for use_no_sync in (True, False):
        ddp = BucketDDP(ToyMLP(seed=0), bucket_cap_bytes=2048)
        dist.barrier(group=ctx.group)
        with CommLedger() as ledger, WireMeter(ctx) as wire:
            for k, (x, y) in enumerate(zip(xb.chunk(accum), yb.chunk(accum))):
                last = k == accum - 1
                with ddp.no_sync() if use_no_sync and not last else contextlib.nullcontext():
                    (default_loss(ddp(x), y) / accum).backward()
                if not use_no_sync or last:
                    ddp.finish_gradient_synchronization()
        out[use_no_sync] = DDPRun(
            "bucket",
            comm_count=ledger.count("all_reduce"),
            comm_bytes=ledger.bytes_sent("all_reduce"),
            wire_bytes=wire.sent,
            grads={n: p.grad.clone() for n, p in ddp.module.named_parameters()},
        )
    return out


@dataclass
class EpochCount:
    samples: int  # indices this rank's sampler handed out
    steps: int  # optimizer steps this rank took (each ended in an all-reduce)


def balanced_epoch(ctx: Any, n_samples: int = 5, batch_size: int = 2) -> dict[bool, EpochCount]:
    """Section 3's loop, fed by DistributedSampler (which pads, or drops with drop_last=True, to
    an equal count per rank). Returns {drop_last: EpochCount}: every rank finishes."""
    from torch.utils.data import DistributedSampler

    x_all, y_all = regression_batches(1, n_samples, seed=0)[0]
    out = {}
    for drop_last in (False, True):
        sampler = DistributedSampler(
            range(n_samples),
            num_replicas=ctx.world_size,
            rank=ctx.rank,
            shuffle=False,
            drop_last=drop_last,
        )
        idx, ddp, steps = list(sampler), BucketDDP(ToyMLP(seed=0)), 0
        for s in range(0, len(idx), batch_size):
            ddp.zero_grad()
            batch = idx[s : s + batch_size]
            default_loss(ddp(x_all[batch]), y_all[batch]).backward()
            ddp.finish_gradient_synchronization()
            steps += 1
        out[drop_last] = EpochCount(len(idx), steps)
    return out


# --- section 6: DDP communication hooks --------------------------------------------------------

HOOKS = ("none", "fp16", "bf16", "powersgd-1", "powersgd-4")
POWERSGD_START = 2  # PowerSGD runs plain all-reduces for its first steps (torch requires >= 2)


def bf16_hook(process_group, bucket):
    """torch's bf16_compress_hook, without its NCCL-only guard: cast the bucket to bfloat16,
    divide by N, all-reduce (half the bytes), cast back. gloo on CPU reduces bf16 too.
    (Another name, and no annotations: DDP refuses a hook NAMED bf16_compress_hook without
    NCCL, and checks annotations as objects, which `from __future__ import annotations` hides.)"""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import _compress_hook

    return _compress_hook(torch.bfloat16, process_group, bucket)


def _register_hook(ddp: DistributedDataParallel, hook: str) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        ddp.register_comm_hook(None, bf16_hook)
    elif hook.startswith("powersgd"):
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=int(hook.split("-")[1]),
            start_powerSGD_iter=POWERSGD_START,
        )
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    elif hook != "none":
        raise ValueError(f"unknown hook {hook!r}; choose one of {HOOKS}")


def powersgd_floats(model: nn.Module, rank: int, min_compression_rate: float = 2.0) -> int:
    """Numbers PowerSGD all-reduces per step for ``model``: each weight matrix (n, m) as two
    factors P (n, rank) and Q (m, rank) when that saves at least ``min_compression_rate``x
    (torch's default test), every other tensor (biases, vectors) as it is. Vogels et al. 2019."""
    total = 0
    for p in model.parameters():
        if p.dim() >= 2:
            n, m = p.shape[0], p.numel() // p.shape[0]
            if rank * (n + m) * min_compression_rate < n * m:  # torch's _should_compress
                total += rank * (n + m)
                continue
        total += p.numel()
    return total


def _cpu_buckets_need_no_cuda_sync(
    hook: str, device: torch.device
) -> contextlib.AbstractContextManager:
    """torch's PowerSGD hook ends with ``if torch.cuda.is_available():
    torch.cuda.synchronize(device)``
    also when the bucket is on the CPU, which raises ("Expected a cuda device, but got: cpu") on a
    GPU machine whose ranks run gloo on CPU: seen on an H200 with torch 2.11, and the same lines are
    in 2.13's powerSGD_hook.py. CPU buckets need no CUDA sync, so while a CPU model trains with
    PowerSGD, this rank reports CUDA as absent to that check."""
    if hook.startswith("powersgd") and device.type == "cpu" and torch.cuda.is_available():
        return mock.patch.object(torch.cuda, "is_available", return_value=False)
    return contextlib.nullcontext()


def comm_hooks(
    ctx: Any, cfg: GPTConfig, batch_per_rank: int, steps: int, hooks: tuple[str, ...] = HOOKS
) -> dict[str, DDPRun]:
    """torch DDP over TinyGPT with each communication hook, ``steps`` AdamW steps on the same
    shards; the last step inside a WireMeter (after PowerSGD's plain-all-reduce start).
    Returns {hook: DDPRun(losses, wire_bytes)}."""
    from lab_utils.measure import WireMeter

    if steps <= POWERSGD_START:
        raise ValueError(f"steps must exceed {POWERSGD_START} (PowerSGD's first steps are plain)")
    shards = rank_batches(ctx, cfg, batch_per_rank, steps)
    out = {}
    for hook in hooks:
        ddp = DistributedDataParallel(TinyGPT(cfg, seed=0))
        _register_hook(ddp, hook)
        opt = make_optimizer(ddp.parameters(), "adamw", LR)
        run = DDPRun(f"torch DDP, {hook}")
        with _cpu_buckets_need_no_cuda_sync(hook, ctx.device):
            for i, (x, y) in enumerate(shards):
                if i == steps - 1:
                    dist.barrier(group=ctx.group)
                    with WireMeter(ctx) as wire:
                        run.losses.append(train_step(ddp, opt, x, y))
                    run.wire_bytes = wire.sent
                else:
                    run.losses.append(train_step(ddp, opt, x, y))
        run.losses = mean_over_ranks(run.losses, ctx.group)
        out[hook] = run
    return out


# --- section 8: asynchronous SGD, simulated -------------------------------------------------


def stale_sgd(k: int, steps: int, lr: float = 0.3) -> list[float]:
    """Asynchronous SGD, simulated in one process: the gradient applied at step t was computed
    at the weights of step t-k (a worker that read the server's weights k updates ago). Plain
    SGD on the toy regression; returns the loss after each update."""
    model, worker = ToyMLP(seed=0), ToyMLP(seed=0)  # the server's weights; a worker's copy
    history = [[p.detach().clone() for p in model.parameters()]]  # weights after each update
    losses = []
    for x, y in regression_batches(steps, 32, seed=6):
        with torch.no_grad():  # the worker computes its gradient at the weights of k updates ago
            for w, old in zip(worker.parameters(), history[max(0, len(history) - 1 - k)]):
                w.copy_(old)
        worker.zero_grad()
        default_loss(worker(x), y).backward()
        with torch.no_grad():  # ... and the server applies it to today's weights
            for p, w in zip(model.parameters(), worker.parameters()):
                p -= lr * w.grad
            losses.append(default_loss(model(x), y).item())
        history.append([p.detach().clone() for p in model.parameters()])
    return losses
