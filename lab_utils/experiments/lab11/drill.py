"""Lab 11's checkpoint drill, in one launch: what an exact resume needs, and what a save costs.

checkpoint_drill  an uninterrupted reference, resumes without the RNG state or without the
                  data position, sharded vs rank-0 saves, and (optionally) the save stall
compare_saves     sharded DCP save vs gathering everything to rank 0: bytes and time
reshard_load      a checkpoint written by N ranks read back by another number of ranks
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from lab_utils.experiments.lab11.elastic import save_stall
from lab_utils.experiments.lab11.training import (
    RunConfig,
    ShuffledLoader,
    build,
    eval_loss,
    full_fingerprint,
    restore,
    run_data,
    train_loop,
    train_run,
)


@dataclass(frozen=True)
class SaveComparison:
    """A sharded DCP save vs a rank-0 full save of the same state, seen from one rank."""

    sharded_s: float
    full_s: float
    held_sharded: int  # tensor bytes this rank held for the sharded save (its shards)
    held_full: int  # ... for the rank-0 save (rank 0: everything; others: 0)
    files: dict[str, int]  # the sharded checkpoint's files and their sizes
    full_file: int  # size of the rank-0 file (0 on other ranks)


def compare_saves(ctx, model, opt, root: str) -> SaveComparison:
    """Time and size a sharded DCP save against a rank-0 full save of the same state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    def held(sd) -> int:  # bytes of the tensors this rank holds (a DTensor: its local shard)
        return sum(
            held(v) if isinstance(v, dict) else getattr(v, "_local_tensor", v).nbytes
            for v in sd.values()
            if isinstance(v, (dict, torch.Tensor))
        )

    times, out = [time.perf_counter()], {}
    for how in ("sharded", "full"):
        dist.barrier(group=ctx.group)
        if how == "sharded":  # every rank writes its own shards
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(root, "sharded"))
        else:  # all-gather to rank 0 (cpu_offload: only rank 0 keeps the result)
            msd, osd = get_state_dict(
                model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
            if ctx.rank == 0:
                torch.save({"model": msd, "optim": osd}, os.path.join(root, "full_rank0.pt"))
        dist.barrier(group=ctx.group)
        times.append(time.perf_counter())
        out[f"{how}_s"], out[f"held_{how}"] = times[-1] - times[-2], held({"m": msd, "o": osd})
    files = {
        f: os.path.getsize(os.path.join(root, "sharded", f))
        for f in os.listdir(os.path.join(root, "sharded"))
    }
    full = os.path.getsize(os.path.join(root, "full_rank0.pt")) if ctx.rank == 0 else 0
    return SaveComparison(files=files, full_file=full, **out)


@dataclass(frozen=True)
class CheckpointDrill:
    """checkpoint_drill's result (every rank returns the same global losses)."""

    uninterrupted: dict[int, float]  # step -> loss of the run that never crashed
    evals: dict[int, float]  # saved step -> eval loss just before saving
    fingerprint: str  # full-state sha256 at fingerprint_at
    resumed_from: str  # the checkpoint the incomplete resumes started from
    no_rng: dict[int, float]  # resumed without the RNG states
    no_data: dict[int, float]  # resumed without the data position
    saves: SaveComparison
    stall: list = field(default_factory=list)  # elastic.save_stall's, if asked for


def checkpoint_drill(
    ctx,
    cfg: RunConfig,
    good_root: str,
    resume_from: str,
    fingerprint_at: int,
    stall_root: str | None = None,
    stall_steps: int = 4,
) -> CheckpointDrill:
    """One launch: the uninterrupted run (with checkpoints), two incomplete resumes from the
    crashed job's checkpoint `resume_from` (no RNG, no data position), sharded-vs-rank-0
    saving of the final state and, with `stall_root`, elastic.save_stall."""
    full, model, opt = train_loop(ctx, cfg, good_root, fingerprint_at=fingerprint_at)
    partial = {
        name: train_run(ctx, cfg, None, resume_from=resume_from, what=what).losses
        for name, what in (("no_rng", ("data",)), ("no_data", ("rng",)))
    }
    stall = save_stall(ctx, stall_root, steps=stall_steps) if stall_root else []
    return CheckpointDrill(
        uninterrupted=full.losses,
        evals=full.evals,
        stall=stall,
        fingerprint=full.fingerprint,
        resumed_from=os.path.basename(resume_from),
        saves=compare_saves(ctx, model, opt, good_root),
        **partial,
    )


@dataclass(frozen=True)
class Resharded:  # what reshard_load returns
    step: int
    eval: float
    data: dict
    fingerprint: str
    lr: float


def reshard_load(ctx, cfg: RunConfig, path: str) -> Resharded:
    """Load a checkpoint saved on any number of ranks into THIS world size; eval, fingerprint."""
    model, opt, sched = build(cfg)
    loader = ShuffledLoader(cfg.n_samples, cfg.global_batch, cfg.seed)
    step = restore(path, model, opt, sched, loader, ctx.rank, what=("data",))
    _, _, eval_x, eval_y = run_data(cfg)
    return Resharded(
        step=step,
        eval=eval_loss(model, eval_x, eval_y),
        data=loader.state_dict(),
        fingerprint=full_fingerprint(model, opt),
        lr=sched.get_last_lr()[0],
    )
