"""Production drills (lab 11), part 1: checkpoint, crash, restart, resume exactly.

Sharded checkpoints, torch.distributed.checkpoint (DCP) with FSDP2:
    dcp.save(state, checkpoint_id=path)   # rank r writes ONLY its shards: __<r>_0.distcp
    dcp.load(state, checkpoint_id=path)   # rank r reads the slices ITS layout needs (resharding)
A DCP save exchanges only small plans between ranks; the tensor bytes go from every rank straight
to storage. Rank 0 writes `.metadata` LAST: a directory without it is incomplete.
Exact resume needs everything that decides the next step: weights, optimizer and scheduler
state, the step, the data position and every rank's RNG state.

    train_run        FSDP2 training, a DCP checkpoint every k steps, optional injected crash
    checkpoint_drill uninterrupted reference + incomplete resumes + sharded vs rank-0 save
Under torchrun (elastic restart, save stalls): lab11_elastic.py; faults: lab11_faults.py.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist

from lab_utils.data import shard_for_rank, token_batches
from lab_utils.experiments.lab11_faults import dp_step, param_checksum  # noqa: F401 (find_the_hang)
from lab_utils.models import GPTConfig, TinyGPT
from lab_utils.reference import default_loss, make_optimizer


# ----------------------------------------------------------------------------- the run
@dataclass(frozen=True)
class RunConfig:
    model: GPTConfig = field(default_factory=lambda: GPTConfig(dropout=0.1))  # dropout: RNG matters
    steps: int = 8
    global_batch: int = 8        # sequences per step, over all ranks
    n_samples: int = 24          # dataset size: an epoch is n_samples // global_batch steps
    ckpt_every: int = 2
    lr: float = 1e-2
    warmup: int = 4              # linear LR warm-up: the scheduler has state too
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
        idx = torch.randperm(self.n, generator=g)[self.pos:self.pos + self.batch]
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
    state = {"model": msd, "optim": osd, "sched": sched.state_dict(),
             "data": loader.state_dict(), "step": step}
    if rng:
        state[f"rng_rank{rank}"] = torch.get_rng_state()
    return state


def latest_checkpoint(root: str) -> str | None:
    """Newest COMPLETE checkpoint under root (one with the .metadata rank 0 writes last)."""
    done = [d for d in sorted(os.listdir(root)) if d.startswith("step_")
            and os.path.exists(os.path.join(root, d, ".metadata"))] if os.path.isdir(root) else []
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


def _data(cfg: RunConfig):
    m = cfg.model
    (inputs, targets), = token_batches(1, cfg.n_samples, m.seq_len, m.vocab_size, seed=cfg.seed + 1,
                                       noise=0.1)
    (eval_x, eval_y), = token_batches(1, 8, m.seq_len, m.vocab_size, seed=cfg.seed + 2, noise=0.1)
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
    start: int                                           # first step run (the checkpoint's step)
    losses: dict[int, float] = field(default_factory=dict)   # step -> global mean loss
    evals: dict[int, float] = field(default_factory=dict)    # saved step -> eval loss before saving
    fingerprint: str | None = None                       # full-state sha256 at fingerprint_at
    events: list[dict] = field(default_factory=list)     # {kind, start, end, step}: load/step/save


def _train(ctx, cfg: RunConfig, root: str | None, resume_from: str | None = None,
           what=("rng", "data"), crash: tuple[int, int] | None = None, fingerprint_at=None,
           record: Callable[[dict], None] | None = None):
    """The training loop behind train_run and elastic_train; returns (TrainLog, model, opt)."""
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(cfg.seed + 1 + ctx.rank)  # per-rank RNG stream: ranks need different dropout
    model, opt, sched = build(cfg)
    loader = ShuffledLoader(cfg.n_samples, cfg.global_batch, cfg.seed)
    inputs, targets, eval_x, eval_y = _data(cfg)
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


def train_run(ctx, cfg: RunConfig, root: str | None, resume_from: str | None = None,
              what=("rng", "data"), crash: tuple[int, int] | None = None,
              fingerprint_at=None) -> TrainLog:
    """FSDP2 training, a DCP checkpoint every cfg.ckpt_every steps under `root` (None: none).
    resume_from: a checkpoint to start from, restoring `what` besides model/optimizer/scheduler.
    crash=(rank, step): that rank dies (os._exit) between its forward and its backward."""
    return _train(ctx, cfg, root, resume_from, what, crash, fingerprint_at)[0]


# ----------------------------------------------------------------------------- one launch
@dataclass(frozen=True)
class SaveComparison:
    """A sharded DCP save vs a rank-0 full save of the same state, seen from one rank."""
    sharded_s: float
    full_s: float
    held_sharded: int          # tensor bytes this rank held for the sharded save (its shards)
    held_full: int             # ... for the rank-0 save (rank 0: everything; others: 0)
    files: dict[str, int]      # the sharded checkpoint's files and their sizes
    full_file: int             # size of the rank-0 file (0 on other ranks)


def compare_saves(ctx, model, opt, root: str) -> SaveComparison:
    """Time and size a sharded DCP save against a rank-0 full save of the same state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    def held(sd) -> int:  # bytes of the tensors this rank holds (a DTensor: its local shard)
        return sum(held(v) if isinstance(v, dict) else getattr(v, "_local_tensor", v).nbytes
                   for v in sd.values() if isinstance(v, (dict, torch.Tensor)))
    times, out = [time.perf_counter()], {}
    for how in ("sharded", "full"):
        dist.barrier(group=ctx.group)
        if how == "sharded":  # every rank writes its own shards
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(root, "sharded"))
        else:                 # all-gather to rank 0 (cpu_offload: only rank 0 keeps the result)
            msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True,
                                                                            cpu_offload=True))
            if ctx.rank == 0:
                torch.save({"model": msd, "optim": osd}, os.path.join(root, "full_rank0.pt"))
        dist.barrier(group=ctx.group)
        times.append(time.perf_counter())
        out[f"{how}_s"], out[f"held_{how}"] = times[-1] - times[-2], held({"m": msd, "o": osd})
    files = {f: os.path.getsize(os.path.join(root, "sharded", f))
             for f in os.listdir(os.path.join(root, "sharded"))}
    full = os.path.getsize(os.path.join(root, "full_rank0.pt")) if ctx.rank == 0 else 0
    return SaveComparison(files=files, full_file=full, **out)


@dataclass(frozen=True)
class CheckpointDrill:
    """checkpoint_drill's result (every rank returns the same global losses)."""
    uninterrupted: dict[int, float]   # step -> loss of the run that never crashed
    evals: dict[int, float]           # saved step -> eval loss just before saving
    fingerprint: str                  # full-state sha256 at fingerprint_at
    resumed_from: str                 # the checkpoint the incomplete resumes started from
    no_rng: dict[int, float]          # resumed without the RNG states
    no_data: dict[int, float]         # resumed without the data position
    saves: SaveComparison
    stall: list = field(default_factory=list)   # lab11_elastic.save_stall's, if asked for


def checkpoint_drill(ctx, cfg: RunConfig, good_root: str, resume_from: str,
                     fingerprint_at: int, stall_root: str | None = None,
                     stall_steps: int = 4) -> CheckpointDrill:
    """One launch: the uninterrupted run (with checkpoints), two incomplete resumes from the
    crashed job's checkpoint `resume_from` (no RNG, no data position), sharded-vs-rank-0
    saving of the final state and, with `stall_root`, lab11_elastic.save_stall."""
    from lab_utils.experiments.lab11_elastic import save_stall

    full, model, opt = _train(ctx, cfg, good_root, fingerprint_at=fingerprint_at)
    partial = {name: train_run(ctx, cfg, None, resume_from=resume_from, what=what).losses
               for name, what in (("no_rng", ("data",)), ("no_data", ("rng",)))}
    stall = save_stall(ctx, stall_root, steps=stall_steps) if stall_root else []
    return CheckpointDrill(uninterrupted=full.losses, evals=full.evals, stall=stall,
                           fingerprint=full.fingerprint, resumed_from=os.path.basename(resume_from),
                           saves=compare_saves(ctx, model, opt, good_root), **partial)


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
    _, _, eval_x, eval_y = _data(cfg)
    return Resharded(step=step, eval=eval_loss(model, eval_x, eval_y), data=loader.state_dict(),
                     fingerprint=full_fingerprint(model, opt), lr=sched.get_last_lr()[0])
