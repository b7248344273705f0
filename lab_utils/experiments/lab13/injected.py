"""Section 5 of lab 13: data-parallel runs with ONE injected problem each, profiled on every rank.

    PROBLEMS              the problems a run can carry ("healthy" carries none)
    diagnosis_cases(ctx, cfg, batch, steps, problems)
                          rank worker: one profiled run per problem (BucketDDP, SGD, 4 ranks);
                          returns {problem: Case} (the evidence and the merged timeline), and
                          keeps it for the life of the rank process, so the exercise's check on
                          the same warm ranks reads the same traces instead of profiling again

The injections, each what a real job does by accident:
    straggler     rank 2 does extra work every step (a slower GPU, a noisy neighbour)
    data_stall    every rank reads its batch from a DataLoader whose dataset is slow
    big_bucket    one bucket holds every gradient: its all-reduce can start only after backward
    host_sync     the step logs every gradient's norm with .item() (a host sync on a GPU)
    recompile     a torch.compile'd loss sees a new sequence length every step: Dynamo
                  recompiles each time (dynamic=False, as a shape-specialising compile does)
Trace files go to a temporary folder that is removed before the worker returns.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from lab_utils.experiments.common import rank_batches
from lab_utils.models import GPTConfig, TinyGPT, lm_loss
from lab_utils.parallel.data_parallel import BucketDDP
from lab_utils.profiling import (
    Evidence,
    evidence,
    gantt_events,
    load_traces,
    profiled_steps,
    rank_timelines,
)

PROBLEMS = ("straggler", "data_stall", "big_bucket", "host_sync", "recompile")
SLOW_RANK = 2
STALL_S = 0.03  # the slow dataset: seconds per batch
EXTRA_MATMULS = 60  # the straggler's extra (256 x 256) matmuls per step
_CACHE: dict = {}  # (problems, cfg, batch, steps) -> {problem: Case}, on each rank


@dataclass
class Case:
    problem: str  # what was injected (the grader's truth)
    evidence: Evidence
    events: list[dict]  # the merged timeline (lab_utils.viz.gantt events)


class _SlowTokens(Dataset):
    """A map-style dataset that takes STALL_S per batch to produce (a slow disk, a decoder)."""

    def __init__(self, batches: list) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int):
        time.sleep(STALL_S)
        return self.batches[i]


def _step_fn(ctx: Any, problem: str, cfg: GPTConfig, batch: int, steps: int) -> Callable:
    cap = 2**30 if problem == "big_bucket" else 2**13  # one bucket vs several
    ddp = BucketDDP(TinyGPT(cfg, seed=0), bucket_cap_bytes=cap)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-2)
    shards = rank_batches(ctx, cfg, batch, steps + 1)
    loader = (
        iter(DataLoader(_SlowTokens(shards), batch_size=None)) if problem == "data_stall" else None
    )
    loss_fn = (
        torch.compile(lm_loss, backend="eager", dynamic=False)
        if problem == "recompile"
        else lm_loss
    )
    a = torch.randn(256, 256)

    def step(i: int) -> None:
        x, y = next(loader) if loader is not None else shards[i]
        if problem == "recompile":
            x, y = x[:, : cfg.seq_len - i], y[:, : cfg.seq_len - i]  # a new length each step
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        if problem == "straggler" and ctx.rank == SLOW_RANK:
            for _ in range(EXTRA_MATMULS):
                a @ a
        loss.backward()
        ddp.finish_gradient_synchronization()
        if problem == "host_sync":
            norms = [p.grad.norm().item() for p in ddp.parameters()]  # logged every step
            assert all(n == n for n in norms)
        opt.step()
        loss.item()

    return step


def diagnosis_cases(
    ctx: Any, cfg: GPTConfig, batch: int, steps: int, problems: tuple = PROBLEMS
) -> dict[str, Case]:
    key = (problems, cfg, batch, steps)
    if key in _CACHE:
        return _CACHE[key]
    box = [tempfile.mkdtemp(prefix="lab13_diagnosis_") if ctx.rank == 0 else None]
    dist.broadcast_object_list(box, src=0, group=ctx.group)
    folder, out = box[0], {}
    try:
        for problem in problems:
            step = _step_fn(ctx, problem, cfg, batch, steps)
            profiled_steps(ctx.rank, folder, problem, step, steps, warmup=0)
            dist.barrier(group=ctx.group)  # every rank's file is written
            paths = [f"{folder}/{problem}_rank{r}.json" for r in range(ctx.world_size)]
            files = load_traces(paths)
            out[problem] = Case(problem, evidence(files), gantt_events(rank_timelines(files)))
    finally:
        dist.barrier(group=ctx.group)  # nobody still reads the folder
        if ctx.rank == 0:
            shutil.rmtree(folder, ignore_errors=True)
    _CACHE[key] = out
    return out
