"""Lab 11's faults: jobs that break without crashing.

    nan_drill          one bad sample makes every rank's weights NaN; a guard names rank + sample
    divergence_drill   replicas that silently drift apart, caught with a checksum all-gather
    straggler_drill    one rank made slow (INJECTED); everyone waits at the next collective; the
                       per-rank compute times, all-gathered every step, name it
    hung_job           a hang under plain torchrun (scripts/hung_job.py): stack dumps via
                       faulthandler on SIGUSR1, the collective flight recorder, a watchdog
The hang drills run through the course launcher: lab_utils/exercises/find_the_hang.py.
A ToyMLP with hand-written data parallelism (lab 04) and SGD written out: a drill rank reaches
its collectives quickly (the first use of torch.optim imports torch._dynamo, seconds per rank).
"""

from __future__ import annotations

import faulthandler
import hashlib
import os
import pickle
import signal
import statistics
import threading
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils.data import regression_batches, shard_for_rank
from lab_utils.models import ToyMLP


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


# ----------------------------------------------------------------------------- NaN
@dataclass(frozen=True)
class NanStep:
    loss: float  # this rank's loss (inf when its batch holds the bad sample)
    params_finite: bool  # are this rank's weights still finite after the step?
    skipped: dict | None  # guard only: {"rank", "sample"} of the step it skipped


def nan_drill(
    ctx, steps: int = 4, bad: tuple[int, int, int] = (1, 2, 5), guard: bool = False
) -> list[NanStep]:
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
            report[ctx.rank] = torch.tensor(
                [float(len(rows) > 0 or not grads_ok), float(rows[0]) if len(rows) else -1.0]
            )
            dist.all_reduce(report, group=ctx.group)  # every rank now knows who, and which sample
            if report[:, 0].any():
                rank = int(report[:, 0].nonzero()[0])
                skipped = {"rank": rank, "sample": int(report[rank, 1])}
        if skipped is None:
            average_grads_and_step(model, ctx.group)
        finite = all(torch.isfinite(p).all() for p in model.parameters())
        history.append(NanStep(per_sample.mean().item(), bool(finite), skipped))
    return history


# ----------------------------------------------------------------------------- drifting replicas
def param_checksum(model) -> int:
    """A 60-bit hash of every parameter's bytes: equal iff the replicas are (bitwise) equal."""
    h = hashlib.sha256(
        b"".join(
            p.detach().contiguous().view(torch.uint8).numpy().tobytes() for p in model.parameters()
        )
    )
    return int(h.hexdigest()[:15], 16)


@dataclass(frozen=True)
class Divergence:
    checksums: list[list[int]]  # per step: every replica's checksum (all-gathered)
    losses: list[float]  # this rank's training loss per step
    eval: float  # this replica's loss on the whole held-out set
    eval_shard: float  # ... on this rank's quarter of it only
    eval_gathered: float  # the quarters' losses, all-reduced and averaged


def divergence_drill(ctx, steps: int = 5, sync_init: bool = False) -> Divergence:
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
    return Divergence(checksums, losses, full, shard.item(), mean.item() / ctx.world_size)


# ----------------------------------------------------------------------------- stragglers
@dataclass(frozen=True)
class StragglerLog:
    """Per step, per rank (rows = steps, columns = ranks), all-gathered so every rank has it."""

    compute_s: list[list[float]]  # time before entering the collective: this rank's own work
    wait_s: list[list[float]]  # time inside the gradient all-reduce (mostly waiting)
    step_s: list[list[float]]  # the whole step
    slow_rank: int  # the rank made slow (INJECTED: its simulated compute x slowdown)
    from_step: int


def straggler_drill(
    ctx,
    steps: int = 6,
    t_compute: float = 0.03,
    slow_rank: int = 2,
    slowdown: float = 2.0,
    from_step: int = 2,
    numel: int = 1 << 16,
) -> StragglerLog:
    """Data-parallel steps with SIMULATED compute (a sleep: ranks do not compete for cores) and a
    REAL all-reduce of a gradient-sized buffer. From `from_step` on, rank `slow_rank` computes
    `slowdown` times longer (injected: a throttled GPU, a noisy neighbour). Every step each rank
    all-gathers three floats [compute, wait, step]: W x 3 numbers, the cheapest possible
    monitoring, enough to name the straggler."""
    grads = torch.ones(numel)
    rows: list[torch.Tensor] = []
    for step in range(steps):
        dist.barrier(group=ctx.group)
        t0 = time.perf_counter()
        slow = ctx.rank == slow_rank and step >= from_step
        time.sleep(t_compute * (slowdown if slow else 1.0))  # the (simulated) forward + backward
        t1 = time.perf_counter()
        dist.all_reduce(grads, group=ctx.group)  # every rank waits for the slowest
        t2 = time.perf_counter()
        table = torch.zeros(ctx.world_size, 3, dtype=torch.float64)
        mine = torch.tensor([[t1 - t0, t2 - t1, t2 - t0]], dtype=torch.float64)
        dist.all_gather_into_tensor(table, mine, group=ctx.group)  # (W, 3)
        rows.append(table)
    cols = [[row[:, k].tolist() for row in rows] for k in range(3)]
    return StragglerLog(*cols, slow_rank=slow_rank, from_step=from_step)


def find_stragglers(compute_s: list[float], threshold: float = 1.3) -> list[int]:
    """Ranks whose compute time exceeds `threshold` x the median of all ranks (one step)."""
    median = statistics.median(compute_s)
    return [r for r, t in enumerate(compute_s) if t > threshold * median]


def persistent_stragglers(compute_s: list[list[float]], threshold: float = 1.3) -> list[int]:
    """The same test on each rank's MEDIAN compute over several steps (rows = steps): one
    disturbed step (a busy machine, a GC pause) does not make a straggler; a slow GPU does."""
    per_rank = [statistics.median(step[r] for step in compute_s) for r in range(len(compute_s[0]))]
    return find_stragglers(per_rank, threshold)


# ----------------------------------------------------------------------------- a hung job
FR_PREFIX = "fr_rank_"


def dump_flight_recorder(path: str) -> None:
    """Write this process's collective flight recorder (every process group) to `path`: a pickle
    of {version, pg_config, pg_status, entries}, the format torch's fr_trace analyzer reads.
    Recording needs TORCH_FR_BUFFER_SIZE > 0 in the environment before the group is created."""
    from torch._C._distributed_c10d import _dump_fr_trace

    raw = _dump_fr_trace(includeCollectives=True, includeStackTraces=False, onlyActive=False)
    with open(path, "wb") as f:
        f.write(raw)


def read_flight_recorder(path: str) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


class Watchdog:
    """A thread that dumps the flight recorder when the training loop stops making progress.

    NCCL's process group has one built in (TORCH_NCCL_DUMP_ON_TIMEOUT=1 dumps to
    TORCH_FR_DUMP_TEMP_FILE<rank> when a collective times out); gloo has none, so this is the
    few-line version: ``beat()`` after every step; silence for `after_s` -> one dump."""

    def __init__(self, path: str, after_s: float) -> None:
        self.path, self.after_s, self.last = path, after_s, time.monotonic()
        threading.Thread(target=self._watch, daemon=True).start()

    def beat(self) -> None:
        self.last = time.monotonic()

    def _watch(self) -> None:
        while time.monotonic() - self.last < self.after_s:
            time.sleep(0.05)
        dump_flight_recorder(self.path)  # the main thread is blocked in C++, not holding the GIL


def hung_job(ctx, out_dir: str, steps: int = 3, watchdog_s: float = 1.0) -> None:
    """Train a few DP steps, then rank 0 logs a validation loss with a collective only IT calls
    (the bug of lab_utils.exercises.find_the_hang.hang_mismatched) while the others go on to the
    end-of-epoch barrier: a hang. What each rank leaves for the on-call engineer:
      * its pid in <out_dir>/pid_rank<r>, so a person (or a launcher) can signal it;
      * faulthandler registered on SIGUSR1: `kill -USR1 <pid>` prints every thread's Python
        stack to stderr, even while the main thread is blocked inside a collective;
      * a watchdog thread that dumps the flight recorder to <out_dir>/fr_rank_<r> once the
        loop has made no progress for `watchdog_s` seconds."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    with open(os.path.join(out_dir, f"pid_rank{ctx.rank}"), "w") as f:
        f.write(str(os.getpid()))
    dog = Watchdog(os.path.join(out_dir, f"{FR_PREFIX}{ctx.rank}"), watchdog_s)
    model = ToyMLP(seed=0)
    for x, y in regression_batches(steps, 4 * ctx.world_size, seed=1):
        dp_step(model, *shard_for_rank((x, y), ctx.rank, ctx.world_size), ctx.group)
        dog.beat()
    val = torch.ones(1)
    open(os.path.join(out_dir, f"stuck_rank{ctx.rank}"), "w").close()
    if ctx.rank == 0:
        dist.all_reduce(val, group=ctx.group)  # BUG: the other ranks never join
    dist.barrier(group=ctx.group)  # the end of the epoch: nobody gets past


# ----------------------------------------------------------------------------- one launch
@dataclass(frozen=True)
class FaultDrills:
    nan_plain: list[NanStep]
    nan_guarded: list[NanStep]
    diverged: Divergence
    synced: Divergence
    straggler: StragglerLog
    also: dict  # name -> what the extra worker returned


def fault_drills(
    ctx, steps: int = 4, bad=(1, 2, 5), straggler: dict | None = None, also: dict | None = None
) -> FaultDrills:
    """The drills that do not hang, in one launch: NaN (plain, guarded), divergence (bug, fix),
    a straggler, plus `also` = {name: (worker, kwargs)}, e.g. the fixed hang drills."""
    return FaultDrills(
        nan_plain=nan_drill(ctx, steps, bad),
        nan_guarded=nan_drill(ctx, steps, bad, True),
        diverged=divergence_drill(ctx, steps + 1),
        synced=divergence_drill(ctx, steps + 1, sync_init=True),
        straggler=straggler_drill(ctx, **(straggler or {})),
        also={name: worker(ctx, **kwargs) for name, (worker, kwargs) in (also or {}).items()},
    )


def flight_record_rows(dumps: dict[int, dict]) -> list[dict]:
    """One row per rank from its flight-recorder dump: how many collectives it has issued
    (pg_status) and the one that never finished (not `retired`), if any: what a hang looks
    like. (gloo updates the 'completed' counter lazily, so it is not shown.)"""
    rows = []
    for rank, d in sorted(dumps.items()):
        status = next(iter(d["pg_status"].values()))
        pending = [e for e in d["entries"] if not e["retired"]]
        last = pending[-1] if pending else d["entries"][-1]
        rows.append(
            {
                "rank": rank,
                "collectives issued": status["last_enqueued_collective"],
                "recorded": len(d["entries"]),
                "pending collective": f"#{last['collective_seq_id']} "
                f"{last['profiling_name']} {last['input_sizes']}"
                if pending
                else "none",
            }
        )
    return rows


def first_mismatch(dumps: dict[int, dict]) -> str:
    """The core of torch's fr_trace analyzer: line up every rank's collectives by sequence
    number and report the first number at which the ranks did not call the same thing."""
    by_rank = {
        r: {
            e["collective_seq_id"]: (e["profiling_name"], str(e["input_sizes"]))
            for e in d["entries"]
        }
        for r, d in dumps.items()
    }
    for seq in sorted(set().union(*by_rank.values())):
        calls: dict[tuple, list[int]] = {}
        for r, entries in sorted(by_rank.items()):
            calls.setdefault(entries.get(seq, ("(nothing)", "")), []).append(r)
        if len(calls) > 1:
            return f"collective #{seq}: " + "; ".join(
                f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))} called {op} {sizes}"
                for (op, sizes), rs in calls.items()
            )
    return "no mismatch: every rank called the same collectives"
