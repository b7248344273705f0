"""Small worker functions used by lab 00, the doctor and the CLI examples (lab 00).

They live in the library, not in a notebook, so that `python -m lab_utils run
lab_utils.experiments.lab00:hello --nproc 4` and a cluster's torchrun can import them.
"""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from lab_utils.runtime.context import Ctx

LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def hello(ctx: Ctx) -> dict:
    """Each rank reports who it is and the environment torchrun gave it."""
    print(f"hello from rank {ctx.rank} of {ctx.world_size} on {ctx.device} ({ctx.backend})")
    return {"rank": ctx.rank, "device": str(ctx.device), "backend": ctx.backend, "pid": os.getpid(),
            **{k: os.environ.get(k) for k in LAUNCH_ENV}}


def allreduce_demo(ctx: Ctx, size: int = 4) -> dict:
    """Rank r contributes [r, r+1, ...]; after all_reduce(SUM) every rank holds the sum.

    Communication (ring): each rank sends 2(N-1)/N x size x 4 bytes.
    """
    before = torch.arange(size, dtype=torch.float32, device=ctx.device) + ctx.rank
    after = before.clone()
    dist.all_reduce(after, op=dist.ReduceOp.SUM, group=ctx.group)
    print(f"before {before.tolist()} -> after {after.tolist()}")
    return {"before": before.cpu().tolist(), "after": after.cpu().tolist()}


def allreduce_timing(ctx: Ctx, numel: int = 1 << 20, repeats: int = 5) -> float:
    """Median seconds of one all_reduce of `numel` float32 (the doctor's smoke test)."""
    t = torch.ones(numel, device=ctx.device)
    dist.all_reduce(t, group=ctx.group)  # warm-up: connections, buffers
    times = []
    for _ in range(repeats):
        dist.barrier(group=ctx.group)
        start = time.perf_counter()
        dist.all_reduce(t, group=ctx.group)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]
