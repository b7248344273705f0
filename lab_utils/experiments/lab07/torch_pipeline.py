"""Lab 07's runs of torch.distributed.pipelining's schedules, and ``replay`` of a recorded order.

Torch runs the schedule, so we watch INSIDE the stage modules: ``TimedStage`` wraps a stage and
records the ORDER in which each rank runs its F, B and W (B on the input-gradient path, W on a
branch that only the weight-gradient pass reaches; zero-bubble schedules run them apart). On the
emulated cluster (``run_torch_pipeline(..., cluster=...)``) the timeline is the twin's: the
compute each rank was charged for the FLOPs torch's schedule really ran, and its idle gaps; the
bubble is measured there. ``replay`` re-times each rank's recorded ORDER with exact op times and
free messages: what the schedule itself achieves, without its messages or uneven stages.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch import nn

from lab_utils import twin
from lab_utils.calc.timeline import TimelineBubble, bubble_from_timeline
from lab_utils.experiments.lab07.pipeline import make_batch
from lab_utils.measure import Timeline
from lab_utils.models import GPTConfig, TinyGPT, lm_loss, split_stages
from lab_utils.parallel.pipeline_parallel.torch_schedules import (
    TORCH_SCHEDULES,
    build_schedule,
    stage_ids,
)

TORCH_CONFIG = GPTConfig(n_layer=8, d_model=16, n_head=2, seq_len=8, vocab_size=64)


class _MarkF(torch.autograd.Function):
    """Identity; forward records F (from the stage's start), backward records B starting."""

    @staticmethod
    def forward(ctx, h, stage: "TimedStage", t0: float):
        ctx.stage = stage
        stage.record("F", stage.n_f, t0)
        stage.n_f += 1
        return h.clone()  # a new tensor (torch.pipelining detaches stage outputs in place)

    @staticmethod
    def backward(ctx, g):
        s = ctx.stage
        s.record("B", s.n_b, s.now())
        s.n_b += 1
        return g, None, None


class _MarkW(torch.autograd.Function):
    """0 * w in forward; its backward (reached by the weight-gradient pass only) records W."""

    @staticmethod
    def forward(ctx, w, stage: "TimedStage"):
        ctx.stage = stage
        return w * 0

    @staticmethod
    def backward(ctx, g):
        s = ctx.stage
        s.record("W", s.n_w, s.now())
        s.n_w += 1
        return g * 0, None


class TimedStage(nn.Module):
    """A pipeline stage that records its F / B / W operations in the order they run."""

    def __init__(self, inner: nn.Module, stage_id: int, timeline: Timeline) -> None:
        super().__init__()
        self.inner, self.stage_id, self.timeline = inner, stage_id, timeline
        self.w_dummy = nn.Parameter(torch.zeros(()))  # anchors the weight-only "W" branch
        self.reset()

    def reset(self) -> None:
        self.n_f = self.n_b = self.n_w = 0  # micro-batch ids: each stage runs them in order

    def now(self) -> float:
        t = twin.now()
        return self.timeline.now() if t is None else t

    def record(self, name: str, mb: int, t0: float) -> None:
        self.timeline.add(name, t0, self.now(), mb=mb, stage=self.stage_id)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t0 = self.now()
        h = self.inner(x) + _MarkW.apply(self.w_dummy, self)  # + 0: values unchanged
        return _MarkF.apply(h, self, t0)  # (b, T, C), or logits (b, T, V) on the last stage


@dataclass
class TorchRun:
    """One torch-schedule experiment, all ranks merged (t = 0 at the first op)."""

    schedule: str
    m: int
    v: int
    events: list[dict]
    bubble: TimelineBubble
    replayed: list[dict] | None
    replayed_bubble: TimelineBubble | None
    loss: float
    grads: dict[str, torch.Tensor]


def torch_pipeline_step(
    ctx: Any,
    schedule: str = "1f1b",
    m: int = 4,
    micro_batch: int = 2,
    cfg: GPTConfig = TORCH_CONFIG,
    seed: int = 0,
) -> dict:
    """One training step with torch's schedule ``schedule`` on p = world-size ranks, after an
    untimed warm-up step. Returns this rank's recorded order (events), the timed step's window
    on the emulated clock (None off the twin), per-micro-batch losses (rank holding the last
    stage) and gradients by parameter name."""
    _, v, placement, _ = TORCH_SCHEDULES[schedule]
    p, rank = ctx.world_size, ctx.rank
    gc.freeze()  # no full garbage collection of torch's objects inside the timed step
    model = TinyGPT(cfg, seed=seed)
    all_stages = split_stages(model, p * v)
    timeline = Timeline(ctx)
    ids = stage_ids(rank, p, v, placement)
    mods = [TimedStage(all_stages[i], i, timeline) for i in ids]
    sched = build_schedule(schedule, mods, ids, ctx, m, lm_loss)
    x, y = make_batch(m, micro_batch, cfg, seed)
    has_first, has_last = 0 in ids, p * v - 1 in ids
    for _ in range(2):  # warm-up step (first-call set-up, shape checks), then the timed step
        model.zero_grad(set_to_none=True)
        for mod in mods:
            mod.reset()
        timeline.events.clear()
        dist.barrier()
        start = twin.step()  # the timed step's start on the emulated clock (None off it)
        losses: list[torch.Tensor] = []
        args = (x,) if has_first else ()
        kwargs = dict(target=y, losses=losses) if has_last else {}
        sched.step(*args, **kwargs)
    end = twin.step()
    own = {id(q) for st in (all_stages[i] for i in ids) for q in st.parameters()}
    grads = {n: q.grad.clone() for n, q in model.named_parameters() if id(q) in own}
    return dict(
        events=list(timeline.events),
        grads=grads,
        window=None if start is None else (start, end),
        losses=[loss.item() for loss in losses] if has_last else None,
    )


def torch_worker(ctx: Any, experiments: list[dict]) -> list[dict]:
    """Several torch-schedule experiments in one launch (dicts of torch_pipeline_step kwargs)."""
    try:
        return [torch_pipeline_step(ctx, **exp) for exp in experiments]
    finally:
        gc.unfreeze()  # torch_pipeline_step froze what existed; a warm rank runs other work next


def _compute_in(em: twin.Emulation, rank: int, window: tuple[float, float]) -> list[dict]:
    """``rank``'s emulated compute spans inside ``window`` (as Gantt events)."""
    return [
        dict(rank=rank, name=s["name"], start=s["start"], end=s["end"])
        for s in em.records[rank].spans
        if s["stream"] == "compute" and window[0] <= s["start"] < window[1]
    ]


def run_torch_pipeline(
    experiments: list[dict],
    world_size: int,
    cluster: twin.Cluster | None = None,
    scale: twin.Scale | None = None,
    **run_kwargs: Any,
) -> list[TorchRun]:
    """Launch; per experiment the merged events, bubble, mean loss, gradients and ``replayed``:
    the same per-rank order re-timed by ``replay`` (t_f = 1, t_b = 2, T_W = 1). With
    ``cluster`` on the emulated cluster: ``events`` are each rank's emulated compute spans of
    the timed step, ``bubble`` their idle time (EMULATED); without, the recorded order's spans
    on this machine's wall clock."""
    from lab_utils.runtime.launch import run

    # torch.distributed.pipelining costs ~6 s of CPU to import: once in the agent, not per rank
    run_kwargs = {"quiet": True, "preload": ("torch.distributed.pipelining",), **run_kwargs}
    em = None
    if cluster is not None:
        em = twin.emulate(torch_worker, world_size, cluster, experiments, scale=scale, **run_kwargs)
        res = em.results
    else:
        res = run(torch_worker, world_size, experiments, **run_kwargs)
    out = []
    for k, exp in enumerate(experiments):
        per_rank: Sequence[dict] = [res[r][k] for r in range(world_size)]
        order = [e for r in per_rank for e in r["events"]]
        events = (
            order
            if em is None
            else [e for r in range(world_size) for e in _compute_in(em, r, per_rank[r]["window"])]
        )
        t0 = min(e["start"] for e in events)
        events = [dict(e, start=e["start"] - t0, end=e["end"] - t0) for e in events]
        losses = next(r["losses"] for r in per_rank if r["losses"] is not None)
        _, v, _, split = TORCH_SCHEDULES[exp["schedule"]]
        ideal = replay(order, 1.0, 2.0, 1.0, v, split)
        out.append(
            TorchRun(
                exp["schedule"],
                exp.get("m", 4),
                v,
                events,
                bubble_from_timeline(events),
                ideal,
                ideal and bubble_from_timeline(ideal),
                sum(losses) / len(losses),  # mean of micro-batch means = global mean
                {n: g for r in per_rank for n, g in r["grads"].items()},
            )
        )
    return out


def replay(
    events: Sequence[dict],
    t_f: float = 1.0,
    t_b: float = 2.0,
    t_w: float | None = None,
    v: int = 1,
    split: bool = False,
) -> list[dict] | None:
    """Re-time a measured per-rank ORDER of operations with exact op times and free p2p.

    Each rank runs its events (dicts with rank, name F/B/W, mb, stage) in the order recorded;
    an op starts when its rank is free and its input exists: F(i, k) after F(i, k-1), B(i, k)
    after B(i, k+1) (the last stage: after its own F), W(i, k) after B(i, k). Ops last t_f / v,
    t_b / v (B) or, when ``split`` (zero-bubble: W deferred), (t_b - t_w) / v (B) and t_w / v (W,
    t_w = t_b / 2 by default). Without ``split``, W events are dropped: they are part of B.
    What is left is the SCHEDULE's own bubble, without the runtime's overheads; None if the
    order deadlocks. The same max-plus recursion as calc.pipeline.schedule, on a measured order.
    """
    events = [e for e in events if split or e["name"] != "W"]
    t_w = t_b / 2 if t_w is None else t_w
    dur = {"F": t_f / v, "B": (t_b - t_w if split else t_b) / v, "W": t_w / v}
    last = max(e["stage"] for e in events)
    queues: dict[int, list[dict]] = {}
    for e in sorted(events, key=lambda e: e["start"]):
        queues.setdefault(e["rank"], []).append(e)
    end: dict[tuple[str, int, int], float] = {}
    free, pos, out = dict.fromkeys(queues, 0.0), dict.fromkeys(queues, 0), []
    while len(out) < len(events):
        moved = False
        for r, queue in queues.items():
            while pos[r] < len(queue):
                e = queue[pos[r]]
                name, i, k = e["name"], e["mb"], e["stage"]
                dep = {
                    "F": ("F", i, k - 1) if k > 0 else None,
                    "B": ("B", i, k + 1) if k < last else ("F", i, k),
                    "W": ("B", i, k),
                }[name]
                if dep is not None and dep not in end:
                    break  # waits for another stage
                start = max(free[r], end[dep] if dep else 0.0)
                free[r] = end[(name, i, k)] = start + dur[name]
                out.append(dict(e, start=start, end=free[r]))
                pos[r], moved = pos[r] + 1, True
        if not moved:
            return None
    return out
