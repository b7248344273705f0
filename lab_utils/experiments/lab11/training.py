"""Lab 11's training run: FSDP2 with DCP checkpoints, a crash, a restart, an exact resume.

Sharded checkpoints, torch.distributed.checkpoint (DCP) with FSDP2:
    dcp.save(state, checkpoint_id=path)   # rank r writes ONLY its shards: __<r>_0.distcp
    dcp.load(state, checkpoint_id=path)   # rank r reads the slices ITS layout needs (resharding)
A DCP save exchanges only small plans between ranks; the tensor bytes go from every rank straight
to storage. Rank 0 writes `.metadata` LAST: a directory without it is incomplete.
Exact resume needs everything that decides the next step: weights, optimizer and scheduler
state, the step, the data position and every rank's RNG state.

    train_run        FSDP2 training, a DCP checkpoint every k steps, optional injected crash
    train_loop       the loop behind train_run and elastic.elastic_train
    train_state / restore / latest_checkpoint   what a checkpoint holds, and reading it back
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist

from lab_utils.calc import fmt_bytes
from lab_utils.data import shard_for_rank, token_batches
from lab_utils.models import GPTConfig, TinyGPT
from lab_utils.reference import default_loss, make_optimizer


# ----------------------------------------------------------------------------- the run
@dataclass(frozen=True)
class RunConfig:
    model: GPTConfig = field(default_factory=lambda: GPTConfig(dropout=0.1))  # dropout: RNG matters
    steps: int = 8
    global_batch: int = 8  # sequences per step, over all ranks
    n_samples: int = 24  # dataset size: an epoch is n_samples // global_batch steps
    ckpt_every: int = 2
    lr: float = 1e-2
    warmup: int = 4  # linear LR warm-up: the scheduler has state too
    seed: int = 0


class ShuffledLoader:
    """Global batches of indices, reshuffled every epoch. Epoch e's order is a permutation drawn
    from a generator seeded with (seed, e): two ints, (epoch, pos), ARE the data stream's state."""

    def __init__(self, n_samples: int, batch: int, seed: int) -> None:
        self.n, self.batch, self.seed, self.epoch, self.pos = n_samples, batch, seed, 0, 0

    def next_indices(self) -> torch.Tensor:
        if self.pos + self.batch > self.n:  # a new epoch: every step is a full global batch
            self.epoch, self.pos = self.epoch + 1, 0
        g = torch.Generator().manual_seed(1000 * self.seed + self.epoch)
        idx = torch.randperm(self.n, generator=g)[self.pos : self.pos + self.batch]
        self.pos += self.batch
        return idx

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])


def build(cfg: RunConfig):
    """TinyGPT sharded with FSDP2 (each block, then the root), AdamW over the shards, warm-up LR."""
    from torch.distributed.fsdp import fully_shard

    model = TinyGPT(cfg.model, seed=cfg.seed)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    opt = make_optimizer(model.parameters(), "adamw", cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / cfg.warmup))
    return model, opt, sched


def train_state(model, opt, sched, loader, step: int, rank: int, rng: bool = True) -> dict:
    """What one rank contributes to a checkpoint. RNG states differ per rank: one key per rank."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, opt)  # DTensor shards, keyed by parameter name (FQN)
    state = {
        "model": msd,
        "optim": osd,
        "sched": sched.state_dict(),
        "data": loader.state_dict(),
        "step": step,
    }
    if rng:
        state[f"rng_rank{rank}"] = torch.get_rng_state()
    return state


def latest_checkpoint(root: str) -> str | None:
    """Newest COMPLETE checkpoint under root (one with the .metadata rank 0 writes last)."""
    done = (
        [
            d
            for d in sorted(os.listdir(root))
            if d.startswith("step_") and os.path.exists(os.path.join(root, d, ".metadata"))
        ]
        if os.path.isdir(root)
        else []
    )
    return os.path.join(root, done[-1]) if done else None


def restore(path: str, model, opt, sched, loader, rank: int, what=("rng", "data")) -> int:
    """Load a checkpoint into this rank's (possibly differently sharded) model; return its step."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = train_state(model, opt, sched, loader, 0, rank, rng="rng" in what)  # the template
    dcp.load(state, checkpoint_id=path)  # fills the template in place, reading only our slices
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    sched.load_state_dict(state["sched"])
    if "data" in what:
        loader.load_state_dict(state["data"])
    if "rng" in what:
        torch.set_rng_state(state[f"rng_rank{rank}"])
    return int(state["step"])


def full_fingerprint(model, opt) -> str:
    """sha256 of the FULL (gathered) weights and optimizer state, tensor by tensor in name order:
    the same for any sharding, equal only if every byte is equal."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    flat = dict(msd) | {f"{k}.{n}": t for k, st in osd["state"].items() for n, t in st.items()}
    h = hashlib.sha256()
    for key in sorted(flat):
        raw = flat[key].reshape(-1).contiguous().view(torch.uint8)  # the tensor's bytes
        h.update(key.encode() + raw.numpy().tobytes())
    return h.hexdigest()


def run_data(cfg: RunConfig):
    """The run's samples and a fixed evaluation batch: (inputs, targets, eval_x, eval_y)."""
    m = cfg.model
    ((inputs, targets),) = token_batches(
        1, cfg.n_samples, m.seq_len, m.vocab_size, seed=cfg.seed + 1, noise=0.1
    )
    ((eval_x, eval_y),) = token_batches(1, 8, m.seq_len, m.vocab_size, seed=cfg.seed + 2, noise=0.1)
    return inputs, targets, eval_x, eval_y


@torch.no_grad()
def eval_loss(model, x: torch.Tensor, y: torch.Tensor) -> float:
    """Loss on a fixed batch, dropout off (eval mode draws no random numbers)."""
    model.eval()
    loss = default_loss(model(x), y).item()
    model.train()
    return loss


@dataclass
class TrainLog:
    """One rank's record of a training run. Times are time.time() (comparable across processes)."""

    start: int  # first step run (the checkpoint's step)
    losses: dict[int, float] = field(default_factory=dict)  # step -> global mean loss
    evals: dict[int, float] = field(default_factory=dict)  # saved step -> eval loss before saving
    fingerprint: str | None = None  # full-state sha256 at fingerprint_at
    events: list[dict] = field(default_factory=list)  # {kind, start, end, step}: load/step/save


def train_loop(
    ctx,
    cfg: RunConfig,
    root: str | None,
    resume_from: str | None = None,
    what=("rng", "data"),
    crash: tuple[int, int] | None = None,
    fingerprint_at=None,
    record: Callable[[dict], None] | None = None,
):
    """The training loop behind train_run and elastic_train; returns (TrainLog, model, opt)."""
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(cfg.seed + 1 + ctx.rank)  # per-rank RNG stream: ranks need different dropout
    model, opt, sched = build(cfg)
    loader = ShuffledLoader(cfg.n_samples, cfg.global_batch, cfg.seed)
    inputs, targets, eval_x, eval_y = run_data(cfg)
    log = TrainLog(start=0)

    def note(kind: str, t0: float, **extra) -> None:
        event = {"kind": kind, "start": t0, "end": time.time(), "rank": ctx.rank, **extra}
        log.events.append(event)
        if record is not None:
            record(event)

    if resume_from:
        t0 = time.time()
        log.start = restore(resume_from, model, opt, sched, loader, ctx.rank, what)
        note("load", t0, step=log.start)
    for step in range(log.start, cfg.steps):
        t0 = time.time()
        idx = shard_for_rank(loader.next_indices(), ctx.rank, ctx.world_size)  # (B/W,)
        opt.zero_grad()
        loss = default_loss(model(inputs[idx]), targets[idx])
        if crash == (ctx.rank, step):
            note("crash", t0, step=step)
            print(f"simulated crash: rank {ctx.rank} dies in step {step} (os._exit)", flush=True)
            os._exit(1)  # no exception, no cleanup: a segfault, the OOM killer, a lost node
        loss.backward()
        opt.step()
        sched.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, group=ctx.group)
        log.losses[step] = (mean / ctx.world_size).item()
        note("step", t0, step=step, loss=log.losses[step])
        if root is not None and (step + 1) % cfg.ckpt_every == 0:
            log.evals[step + 1] = eval_loss(model, eval_x, eval_y)  # "the loss before saving"
            t0 = time.time()
            state = train_state(model, opt, sched, loader, step + 1, ctx.rank)
            dcp.save(state, checkpoint_id=os.path.join(root, f"step_{step + 1:06d}"))  # collective
            note("save", t0, step=step + 1)
            if step + 1 == fingerprint_at:
                log.fingerprint = full_fingerprint(model, opt)
    return log, model, opt


def train_run(
    ctx,
    cfg: RunConfig,
    root: str | None,
    resume_from: str | None = None,
    what=("rng", "data"),
    crash: tuple[int, int] | None = None,
    fingerprint_at=None,
) -> TrainLog:
    """FSDP2 training, a DCP checkpoint every cfg.ckpt_every steps under `root` (None: none).
    resume_from: a checkpoint to start from, restoring `what` besides model/optimizer/scheduler.
    crash=(rank, step): that rank dies (os._exit) between its forward and its backward."""
    return train_loop(ctx, cfg, root, resume_from, what, crash, fingerprint_at)[0]


def checkpoint_size_row(
    model: str,
    params: int,
    bytes_per_param: float,
    ranks: int,
    size: Callable[[float], str] = fmt_bytes,
) -> dict[str, Any]:
    """One row of lab 11's section 1 table: a checkpoint of ``params`` parameters at
    ``bytes_per_param``, whole and per rank when sharded over ``ranks`` (``size`` formats bytes)."""
    total = bytes_per_param * params
    return {
        "model": model,
        "params": params,
        "B/param": bytes_per_param,
        "checkpoint": size(total),
        "per rank, sharded": size(total / ranks),
    }
