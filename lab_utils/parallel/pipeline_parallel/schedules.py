"""Pipeline parallelism from send/recv: GPipe and 1F1B (lab 07).

Rank s holds stage s of the tiny GPT (``models.split_stages``: stage 0 also holds the embeddings,
the last stage ln_f + head + loss). A global batch of B rows is cut into m micro-batches of
b = B/m rows; each goes forward through the stages and backward in reverse.

Communication: point-to-point between NEIGHBOURS only, no collective. Per micro-batch:
    forward : stage s --isend--> stage s+1   activation      (b, T, C) fp32 = 4 b T C bytes
    backward: stage s <--isend-- stage s+1   d loss / d act  (b, T, C) fp32 = 4 b T C bytes
so each boundary carries 2 * m * 4bTC = 8 B T C bytes per step, whatever the schedule.
Sends are non-blocking (isend, waited at the end of the step) and receives blocking: a stage can
send and then receive from the same neighbour without both waiting on each other. With
``deadlock_after_s`` set, a receive that waits longer raises PipelineStuck naming the op and the
neighbour (a wrong schedule order deadlocks: that message says where).

Schedules are plain functions over a StageWorker (``gpipe``, ``one_f_one_b``, ``from_order``).
Both GPipe and 1F1B idle (p-1)/(m+p-1) of the step; 1F1B holds at most p-s micro-batches of
activations on stage s, GPipe all m (Huang et al. 2019; Narayanan et al. 2021 Sec. 2.2).

SIMULATED-COMPUTE mode (``SimCompute``): every forward is padded with a sleep to t_f and every
backward to t_b = 2 t_f (real compute still runs, so gradients stay exact). Sleeping ranks do not
compete for CPU cores, so 4 ranks on 2 cores measure the SCHEDULE, not the machine.
"""
from __future__ import annotations

import gc
import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from lab_utils.calc.timeline import bubble_from_timeline
from lab_utils.data import token_batches
from lab_utils.measure import SavedActivations, Timeline
from lab_utils.models import GPTConfig, TinyGPT, lm_loss, split_stages

_STEP_TAGS = itertools.count(1)  # every rank runs the same steps, so the counters agree
PP_CONFIG = GPTConfig(n_layer=4, d_model=32, n_head=2, seq_len=16, vocab_size=64)


@dataclass(frozen=True)
class SimCompute:
    """SIMULATED COMPUTE: pad each forward to t_f and each backward to t_b (default 2 t_f)
    seconds; ``stage_cost[s]`` multiplies both on stage s (load imbalance, e.g. the embedding)."""

    t_f: float = 0.02
    t_b: float | None = None
    stage_cost: tuple[float, ...] | None = None

    def times(self, stage: int) -> tuple[float, float]:
        k = self.stage_cost[stage] if self.stage_cost else 1.0
        return k * self.t_f, k * (2 * self.t_f if self.t_b is None else self.t_b)


class PipelineStuck(RuntimeError):
    """A stage waited ``deadlock_after_s`` for a neighbour's message: the order deadlocked."""


class StageWorker:
    """One rank's pipeline stage: forward(i) / backward(i) of micro-batch i, with the p2p.

    Keeps the activations of every micro-batch between its forward and its backward
    (``stored``), and tracks the peak count and the peak bytes autograd saved for them.
    """

    def __init__(self, rank: int, p: int, module: torch.nn.Module, inputs: Sequence[torch.Tensor],
                 targets: Sequence[torch.Tensor], act_shape: tuple[int, ...],
                 sim: SimCompute | None = None, timeline: Timeline | None = None,
                 deadlock_after_s: float | None = None, tag: int = 0) -> None:
        self.rank, self.p, self.module = rank, p, module
        self.first, self.last = rank == 0, rank == p - 1
        self.inputs, self.targets, self.m = inputs, targets, len(inputs)
        self.act_shape = act_shape  # (b, T, C): what crosses every stage boundary
        self.t_f, self.t_b = sim.times(rank) if sim else (0.0, 0.0)
        self.timeline = timeline or Timeline(None)  # {rank, name, start, end, mb, stage} spans
        self.deadlock_after_s = deadlock_after_s
        self.tag = tag  # a fresh tag per step: a message left over by a deadlocked step is never
        #                 taken for one of the next step's (gloo matches p2p by peer and tag)
        self.stored: dict[int, tuple] = {}  # mb -> (input, output or loss, saved bytes)
        self.sends: list[tuple[Any, torch.Tensor]] = []  # (work, tensor kept alive until waited)
        self.peak_in_flight = self.peak_bytes = self.overran = 0
        self.loss = 0.0
        self.n_ops = 0

    # -- communication: neighbours only ----------------------------------------------------
    def _recv(self, src: int, what: str) -> torch.Tensor:
        buf = torch.empty(self.act_shape)
        work = dist.irecv(buf, src, tag=self.tag)
        if self.deadlock_after_s is None:
            work.wait()  # blocking; the process group's timeout is the safety net
            return buf
        # Deadlock detection: wait in a helper thread and give up on it after a while (a gloo
        # wait(timeout) would close the connection, and the ranks could no longer report).
        waiter = threading.Thread(target=work.wait, daemon=True)
        waiter.start()
        waiter.join(self.deadlock_after_s)
        if waiter.is_alive():
            raise PipelineStuck(f"stage {self.rank} waited {self.deadlock_after_s:g} s for {what} "
                                f"from rank {src} (its op #{self.n_ops}), and it never came")
        return buf

    def _send(self, t: torch.Tensor, dst: int) -> None:
        self.sends.append((dist.isend(t, dst, tag=self.tag), t))

    def _pad(self, t0: float, target: float) -> None:
        """SIMULATED COMPUTE: sleep until the op has lasted `target` seconds."""
        left = t0 + target - time.perf_counter()
        if left > 0:
            time.sleep(left)
        elif target > 0:
            self.overran += 1  # the real compute was slower than the simulated time

    # -- the two operations ------------------------------------------------------------------
    def forward(self, i: int) -> None:
        self.n_ops += 1
        if self.first:
            x = self.inputs[i]  # (b, T) token ids
        else:
            x = self._recv(self.rank - 1, f"the activation of micro-batch {i} (F{i})")
            x.requires_grad_()  # we need d loss / d x to send back
        with self.timeline.span("F", mb=i, stage=self.rank):
            t0 = time.perf_counter()
            with SavedActivations(self.module) as acts:  # bytes autograd keeps for backward
                y = self.module(x)  # (b, T, C), or logits (b, T, V) on the last stage
                if self.last:  # mean over the GLOBAL batch: each micro-batch weighs 1/m
                    y = lm_loss(y, self.targets[i]) / self.m
            self._pad(t0, self.t_f)
        self.stored[i] = (x, y, acts.bytes)
        self.peak_in_flight = max(self.peak_in_flight, len(self.stored))
        self.peak_bytes = max(self.peak_bytes, sum(s[2] for s in self.stored.values()))
        if self.last:
            self.loss += y.item()
        else:
            self._send(y.detach(), self.rank + 1)

    def backward(self, i: int) -> None:
        self.n_ops += 1
        if i not in self.stored:
            raise RuntimeError(f"stage {self.rank}: backward of micro-batch {i} before its forward")
        x, y, _ = self.stored.pop(i)  # free this micro-batch's activations after backward
        grad = None if self.last else self._recv(self.rank + 1,
                                                 f"the gradient of micro-batch {i} (B{i})")
        with self.timeline.span("B", mb=i, stage=self.rank):
            t0 = time.perf_counter()
            # = y.backward(grad), the same vector-Jacobian product bit for bit, without its
            # one-off import of sympy (~1 s per process on first use). Backward ADDS into .grad.
            (y if self.last else (y * grad).sum()).backward()
            self._pad(t0, self.t_b)
        if not self.first:
            self._send(x.grad, self.rank - 1)

    def finish(self) -> None:
        """Wait for every outstanding send (all must have been received)."""
        for work, _ in self.sends:
            work.wait()
        self.sends.clear()


# -- schedules: plain functions, one per schedule -------------------------------------------
def gpipe(w: StageWorker) -> None:
    """GPipe (Huang et al. 2019): all m forwards, then all m backwards. Holds m micro-batches."""
    for i in range(w.m):
        w.forward(i)
    for i in range(w.m):
        w.backward(i)


def one_f_one_b(w: StageWorker) -> None:
    """1F1B (PipeDream-flush; Narayanan et al. 2021 Sec. 2.2.1). Holds at most p - s."""
    warmup = min(w.p - w.rank - 1, w.m)  # the stages downstream must fill before a grad returns
    # warm-up: forwards only
    for i in range(warmup):
        w.forward(i)
    # steady state: one forward, one backward
    for j in range(w.m - warmup):
        w.forward(warmup + j)
        w.backward(j)
    # cool-down: the backwards still owed
    for j in range(w.m - warmup, w.m):
        w.backward(j)


def from_order(w: StageWorker, order: Sequence[str]) -> None:
    """Run an explicit order such as ["F0", "F1", "B0", "F2", ...] (the lab 07 exercise)."""
    for op in order:
        (w.forward if op[0] == "F" else w.backward)(int(op[1:]))


SCHEDULES: dict[str, Callable[[StageWorker], None]] = {"gpipe": gpipe, "1f1b": one_f_one_b}


# -- one pipelined training step on this rank, and the launch wrapper ----------------------
def make_batch(m: int, micro_batch: int = 2, cfg: GPTConfig = PP_CONFIG, seed: int = 0):
    """The global batch (B = m * micro_batch rows) every rank regenerates identically."""
    return token_batches(1, m * micro_batch, cfg.seq_len, cfg.vocab_size, seed=seed)[0]


def pipeline_step(ctx: Any, schedule: str = "1f1b", m: int = 4, micro_batch: int = 2,
                  cfg: GPTConfig = PP_CONFIG, balance: list[int] | None = None,
                  sim: SimCompute | None = None, order: Callable | None = None,
                  warmup_step: bool | None = None, deadlock_after_s: float | None = None,
                  seed: int = 0) -> dict:
    """One forward+backward step of a p-stage pipeline (p = world size) on this rank.

    ``order``: a function (stage, p, m) -> ["F0", "B0", ...] that replaces ``schedule``.
    ``warmup_step`` (default: only with ``sim``) runs one untimed step first (real compute).
    Returns this rank's events, peak in-flight micro-batches / saved bytes, its loss part
    (last stage) and its gradients by full-model parameter name.
    """
    p, rank = ctx.world_size, ctx.rank
    # A rank is forked from a process holding all of torch: a full garbage collection scans it
    # all (~0.3 s, at a random moment). Freezing those objects keeps that out of the timeline.
    gc.freeze()
    model = TinyGPT(cfg, seed=seed)  # same seed on every rank: the same weights
    stage = split_stages(model, p, balance)[rank]
    inputs, targets = make_batch(m, micro_batch, cfg, seed)
    shape = (micro_batch, cfg.seq_len, cfg.d_model)
    run_one = (lambda w: from_order(w, order(rank, p, m))) if order else SCHEDULES[schedule]
    warmup_step = sim is not None if warmup_step is None else warmup_step
    for timed in ([False] if warmup_step else []) + [True]:
        # the untimed warm-up step (real compute) keeps first-call allocations out of the timeline
        w = StageWorker(rank, p, stage, inputs.chunk(m), targets.chunk(m), shape,
                        sim if timed else None, Timeline(ctx) if timed else None,
                        deadlock_after_s, tag=next(_STEP_TAGS))
        if timed:
            model.zero_grad(set_to_none=True)
            dist.barrier()  # every rank starts the timed step together
        run_one(w)
        w.finish()
    own = {id(q) for q in stage.parameters()}
    grads = {n: q.grad.clone() for n, q in model.named_parameters() if id(q) in own}
    return dict(events=w.timeline.events, peak_in_flight=w.peak_in_flight, peak_bytes=w.peak_bytes,
                loss=w.loss if w.last else None, grads=grads, overran=w.overran)


def pp_worker(ctx: Any, experiments: list[dict]) -> list[dict]:
    """Several pipeline experiments in ONE launch (each dict = pipeline_step keyword args)."""
    return [pipeline_step(ctx, **exp) for exp in experiments]


def merge(per_rank: Sequence[dict], **meta: Any) -> dict:
    """Combine the ranks' results of one experiment (times shifted so the step starts at 0)."""
    events = [e for r in per_rank for e in r["events"]]
    t0 = min(e["start"] for e in events)
    events = [dict(e, start=e["start"] - t0, end=e["end"] - t0) for e in events]
    return dict(meta, p=len(per_rank), events=events, bubble=bubble_from_timeline(events),
                peak_in_flight=[r["peak_in_flight"] for r in per_rank],
                peak_bytes=[r["peak_bytes"] for r in per_rank], loss=per_rank[-1]["loss"],
                grads={n: g for r in per_rank for n, g in r["grads"].items()},
                overran=sum(r["overran"] for r in per_rank))


def run_pipeline(experiments: list[dict], world_size: int, **run_kwargs: Any) -> list[dict]:
    """Launch ``pp_worker`` on world_size ranks; one merged result per experiment."""
    from lab_utils.runtime.launch import oversubscription_note, run

    note = oversubscription_note(world_size, "gloo")
    if note and any(e.get("sim") is None for e in experiments):
        print(f"[pp] real-compute mode: {note}")  # simulated compute sleeps: no such caveat
    res = run(pp_worker, world_size, experiments, **{"quiet": True, **run_kwargs})
    return [merge([res[r][k] for r in range(world_size)], **{"schedule": "1f1b", "m": 4, **exp})
            for k, exp in enumerate(experiments)]


def stage_compute_costs(cfg: GPTConfig, p: int, micro_batch: int = 2, repeats: int = 15,
                        balance: list[int] | None = None) -> list[float]:
    """CPU seconds of forward + backward of one micro-batch on each of the p stages (this
    process, one thread, best of ``repeats``): the embeddings and the head slow their stages."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: a stand-in for one device, and no fight over cores
    x, y = make_batch(1, micro_batch, cfg)
    costs, h = [], x
    for st in split_stages(TinyGPT(cfg, seed=0), p, balance):
        inp = h if st.is_first else h.detach().requires_grad_()
        best = float("inf")
        for _ in range(repeats):
            t0 = time.thread_time()
            h = st(inp)
            (lm_loss(h, y) if st.is_last else h.sum()).backward()
            best = min(best, time.thread_time() - t0)
        costs.append(best)
    torch.set_num_threads(threads)
    return costs


def reference_grads(m: int = 4, micro_batch: int = 2, cfg: GPTConfig = PP_CONFIG,
                    seed: int = 0) -> tuple[float, dict[str, torch.Tensor]]:
    """Single process, whole batch: the loss and d loss / d param every pipeline must match."""
    model = TinyGPT(cfg, seed=seed)
    inputs, targets = make_batch(m, micro_batch, cfg, seed)
    loss = lm_loss(model(inputs), targets)
    loss.backward()
    return loss.item(), {n: q.grad.clone() for n, q in model.named_parameters()}
