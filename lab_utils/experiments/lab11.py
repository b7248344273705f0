"""Production drills (lab 11): checkpoint and resume exactly, then break training on purpose.

Sharded checkpoints, torch.distributed.checkpoint (DCP) with FSDP2:
    dcp.save(state, checkpoint_id=path)   # rank r writes ONLY its shards: __<r>_0.distcp
    dcp.load(state, checkpoint_id=path)   # rank r reads the slices ITS layout needs (resharding)
A DCP save communicates only small plans (gathered to rank 0, scattered back); the tensor bytes
go straight to disk, from every rank in parallel. Rank 0 writes `.metadata` LAST: a directory
without it is incomplete. Rank-0 saving all-gathers every tensor into one process first.
Exact resume needs everything that decides the next step: weights, optimizer and scheduler
state, the step, the data position and every rank's RNG state. The NaN and divergence drills use
a ToyMLP with hand-written data parallelism (the hang drills: lab_utils/exercises/find_the_hang).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils.data import regression_batches, shard_for_rank, token_batches
from lab_utils.models import GPTConfig, TinyGPT, ToyMLP
from lab_utils.reference import default_loss, make_optimizer


# ----------------------------------------------------------------------------- checkpointing
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
        if self.pos + self.batch > self.n:  # drop_last: every step is a full global batch
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


def train_run(ctx, cfg: RunConfig, root: str | None, resume_from: str | None = None,
              what=("rng", "data"), crash: tuple[int, int] | None = None, fingerprint_at=None):
    """FSDP2 training with a DCP checkpoint every cfg.ckpt_every steps under `root` (None: none).

    resume_from: a checkpoint to start from, restoring `what` besides model/optimizer/scheduler.
    crash=(rank, step): that rank dies mid-step (os._exit: no exception, no cleanup, like a
    SIGKILL or a lost node); the others are left waiting in the backward's reduce-scatter.
    Returns the global mean loss of every step run, the eval loss just before every save, and
    (at step fingerprint_at) the fingerprint of the full state.
    """
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(cfg.seed + 1 + ctx.rank)  # per-rank RNG stream: ranks need different dropout
    model, opt, sched = build(cfg)
    loader = ShuffledLoader(cfg.n_samples, cfg.global_batch, cfg.seed)
    inputs, targets, eval_x, eval_y = _data(cfg)
    start = restore(resume_from, model, opt, sched, loader, ctx.rank, what) if resume_from else 0
    out = {"start": start, "losses": {}, "evals": {}, "fingerprint": None, "model": (model, opt)}
    for step in range(start, cfg.steps):
        idx = shard_for_rank(loader.next_indices(), ctx.rank, ctx.world_size)  # (B/W,)
        opt.zero_grad()
        loss = default_loss(model(inputs[idx]), targets[idx])
        if crash == (ctx.rank, step):
            print(f"simulated crash: rank {ctx.rank} dies in step {step} (os._exit)", flush=True)
            os._exit(1)
        loss.backward()
        opt.step()
        sched.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, group=ctx.group)
        out["losses"][step] = (mean / ctx.world_size).item()
        if root is not None and (step + 1) % cfg.ckpt_every == 0:
            out["evals"][step + 1] = eval_loss(model, eval_x, eval_y)  # "the loss before saving"
            state = train_state(model, opt, sched, loader, step + 1, ctx.rank)
            dcp.save(state, checkpoint_id=os.path.join(root, f"step_{step + 1:06d}"))  # collective
            if step + 1 == fingerprint_at:
                out["fingerprint"] = full_fingerprint(model, opt)
    return out


def reshard_load(ctx, cfg: RunConfig, path: str) -> dict:
    """Load a checkpoint saved on any number of ranks into THIS world size; eval, fingerprint."""
    model, opt, sched = build(cfg)
    loader = ShuffledLoader(cfg.n_samples, cfg.global_batch, cfg.seed)
    step = restore(path, model, opt, sched, loader, ctx.rank, what=("data",))
    _, _, eval_x, eval_y = _data(cfg)
    return {"step": step, "eval": eval_loss(model, eval_x, eval_y), "data": loader.state_dict(),
            "fingerprint": full_fingerprint(model, opt), "lr": sched.get_last_lr()[0]}


def compare_saves(ctx, model, opt, root: str) -> dict:
    """Time and size a sharded DCP save against a rank-0 full save of the same state."""
    import time

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
    out["files"] = {f: os.path.getsize(os.path.join(root, "sharded", f))
                    for f in os.listdir(os.path.join(root, "sharded"))}
    out["full_file"] = os.path.getsize(os.path.join(root, "full_rank0.pt")) if ctx.rank == 0 else 0
    return out


def checkpoint_drill(ctx, cfg: RunConfig, good_root: str, crashed_root: str, fingerprint_at: int):
    """One launch: the uninterrupted run (with checkpoints), the exact resume of the crashed run,
    two incomplete resumes (no RNG, no data position), and sharded-vs-rank-0 saving."""
    full = train_run(ctx, cfg, good_root, fingerprint_at=fingerprint_at)
    out = {"uninterrupted": full["losses"], "evals": full["evals"],
           "fingerprint": full["fingerprint"]}
    last = latest_checkpoint(crashed_root)  # read before anything new is written there
    out["resumed_from"] = os.path.basename(last)
    for name, what in (("no RNG", ("data",)), ("no data position", ("rng",))):
        out[name] = train_run(ctx, cfg, None, resume_from=last, what=what)["losses"]
    out["resumed"] = train_run(ctx, cfg, crashed_root, resume_from=last)["losses"]  # keeps saving
    out["saves"] = compare_saves(ctx, *full["model"], good_root)
    return out


# ----------------------------------------------------------------------------- fault drills
# A ToyMLP with hand-written data parallelism (lab 04) and SGD written out: a drill rank reaches its
# collectives quickly (the first use of torch.optim imports torch._dynamo, seconds on a busy CPU).
def dp_step(model, x, y, group, lr: float = 0.1) -> float:
    """One DP step: local backward, all-reduce every gradient (average), SGD update."""
    model.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    average_grads_and_step(model, group, lr)
    return loss.item()


@torch.no_grad()
def average_grads_and_step(model, group, lr: float = 0.1) -> None:
    """All-reduce (sum) each gradient, divide by W, SGD update: 2(W-1)/W x P bytes per rank."""
    for p in model.parameters():
        dist.all_reduce(p.grad, group=group)  # one all-reduce per parameter, on every rank
        p -= lr * p.grad / dist.get_world_size(group)


def nan_drill(ctx, steps: int = 4, bad: tuple[int, int, int] = (1, 2, 5), guard: bool = False):
    """Regression on log(price); at step bad[1], sample bad[2] of rank bad[0] has price 0, and
    log(0) = -inf. guard=True checks the LOCAL loss and grads BEFORE the gradient all-reduce,
    shares a (W, 2) report [bad?, first bad sample] in one small all-reduce, and skips the step."""
    model, history = ToyMLP(seed=0), []
    for step, (x, y) in enumerate(regression_batches(steps, 8 * ctx.world_size, seed=3)):
        x, price = shard_for_rank((x, y.exp()), ctx.rank, ctx.world_size)  # (B/W, 16), price > 0
        if (ctx.rank, step) == bad[:2]:
            price[bad[2]] = 0.0  # a missing value stored as 0
        model.zero_grad()
        per_sample = ((model(x) - price.log()) ** 2).mean(dim=1)  # (B/W,): inf where price = 0
        per_sample.mean().backward()
        skipped = None
        if guard:
            rows = (~torch.isfinite(per_sample)).nonzero().flatten()
            grads_ok = all(torch.isfinite(p.grad).all() for p in model.parameters())
            report = torch.zeros(ctx.world_size, 2)
            report[ctx.rank] = torch.tensor([float(len(rows) > 0 or not grads_ok),
                                             float(rows[0]) if len(rows) else -1.0])
            dist.all_reduce(report, group=ctx.group)  # every rank now knows who, and which sample
            if report[:, 0].any():
                rank = int(report[:, 0].nonzero()[0])
                skipped = {"rank": rank, "sample": int(report[rank, 1])}
        if skipped is None:
            average_grads_and_step(model, ctx.group)
        finite = all(torch.isfinite(p).all() for p in model.parameters())
        history.append({"loss": per_sample.mean().item(), "params_finite": bool(finite),
                        "skipped": skipped})
    return history


def param_checksum(model) -> int:
    """A 60-bit hash of every parameter's bytes: equal iff the replicas are (bitwise) equal."""
    h = hashlib.sha256(b"".join(p.detach().contiguous().view(torch.uint8).numpy().tobytes()
                                for p in model.parameters()))
    return int(h.hexdigest()[:15], 16)


def divergence_drill(ctx, steps: int = 5, sync_init: bool = False) -> dict:
    """Each rank seeds with seed + rank (right for dropout or augmentation) and, by mistake, builds
    its weights from that seed too. sync_init=True broadcasts rank 0's weights first (what DDP's
    constructor does). Every step all-gathers each replica's checksum: one int64 per rank."""
    model = ToyMLP(seed=ctx.rank)  # BUG unless sync_init: the replicas start different
    if sync_init:
        for p in model.parameters():
            dist.broadcast(p.data, src=0, group=ctx.group)
    checksums, losses = [], []
    for x, y in regression_batches(steps, 4 * ctx.world_size, seed=4):
        losses.append(dp_step(model, *shard_for_rank((x, y), ctx.rank, ctx.world_size), ctx.group))
        sums = torch.zeros(ctx.world_size, dtype=torch.int64)
        dist.all_gather_into_tensor(sums, torch.tensor([param_checksum(model)]), group=ctx.group)
        checksums.append(sums.tolist())
    x, y = regression_batches(1, 64, seed=5)[0]  # a held-out set; each rank also scores its quarter
    with torch.no_grad():
        full = F.mse_loss(model(x), y).item()
        xs, ys = shard_for_rank((x, y), ctx.rank, ctx.world_size)
        shard = F.mse_loss(model(xs), ys)
    mean = shard.reshape(1).clone()
    dist.all_reduce(mean, group=ctx.group)  # the fix for "a split tensor never gathered"
    return {"checksums": checksums, "losses": losses, "eval": full, "eval_shard": shard.item(),
            "eval_gathered": mean.item() / ctx.world_size}


def fault_drills(ctx, steps: int = 4, bad=(1, 2, 5), also: dict | None = None) -> dict:
    """The drills that do not hang, in one launch: NaN (plain, guarded), divergence (bug, fix),
    plus `also` = {name: (worker, kwargs)}, e.g. the fixed hang drills of find_the_hang."""
    out = {"nan_plain": nan_drill(ctx, steps, bad), "nan_guarded": nan_drill(ctx, steps, bad, True),
           "diverged": divergence_drill(ctx, steps + 1),
           "synced": divergence_drill(ctx, steps + 1, sync_init=True)}
    for name, (worker, kwargs) in (also or {}).items():
        out[name] = worker(ctx, **kwargs)
    return out
