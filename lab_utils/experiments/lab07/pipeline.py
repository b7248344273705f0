"""Lab 07's experiments: pipeline schedules on real ranks, measured from outside, vs one process.

    run_pipeline([dict(schedule="zb-h1", m=8), ...], p, cluster=...) -> [PipelineRun]
                                       (with ``cluster``: on lab_utils.twin's emulated clock)
    pipeline_cluster(...), pipeline_scale(...)   the lab's emulated cluster and its Scale
    reference_grads(m)                 the single-process loss and gradients every run must match
    grad_error(run, ref)               the largest |gradient - reference|
    p2p_bytes_formula(schedule, p, m)  bytes each rank sends per step (formula)
    stage_compute_costs(cfg, p)        real CPU time of each stage (load imbalance)

Each experiment is a dict of ``pipeline_step`` keyword arguments; one launch runs a list of
them. Timing and memory counts come from ``sim.StageObserver`` (emulated seconds when the run is
on the twin); bytes from CommLedger (ledger) and WireMeter (wire) around the step.
"""

from __future__ import annotations

import gc
import itertools
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch
import torch.distributed as dist

from lab_utils import twin
from lab_utils.calc.comm import pp_bytes_per_microbatch
from lab_utils.calc.timeline import TimelineBubble, bubble_from_timeline
from lab_utils.data import token_batches
from lab_utils.experiments.lab06.twin import layer_scale
from lab_utils.experiments.lab07.sim import StageObserver
from lab_utils.measure import CommLedger, Timeline, WireMeter
from lab_utils.models import GPTConfig, TinyGPT, lm_loss, split_stages
from lab_utils.parallel.pipeline_parallel.schedules import SCHEDULES, from_order
from lab_utils.parallel.pipeline_parallel.stage import StageWorker, pipeline_neighbours
from lab_utils.topology import Topology

PP_CONFIG = GPTConfig(n_layer=8, d_model=32, n_head=2, seq_len=16, vocab_size=64)
_STEPS = itertools.count(1)  # every rank runs the same steps, so the counters agree
_TAGS_PER_STEP = 4096  # a step uses tags base .. base + 2 * n_stages


@dataclass
class StageRun:
    """One rank's result of one pipeline step."""

    events: list[dict]
    peak_in_flight: int
    peak_bytes: int
    loss: float | None
    grads: dict[str, torch.Tensor]
    ledger_bytes: float | None = None
    wire: Any = None  # measure.WireBytes, or None when bytes were not measured


@dataclass
class PipelineRun:
    """One experiment, all ranks merged (times shifted so the step starts at 0).
    ``bubble``: idle / step per rank, the step = first start to last end over ALL ranks.
    ``steady_bubble``: idle / each rank's OWN span: a step's cost when consecutive steps
    overlap (ZB-H2's premise, Qi et al. 2023 Sec. 4), its ``max`` the rank that sets the pace."""

    schedule: str
    p: int
    m: int
    v: int
    events: list[dict]
    bubble: TimelineBubble
    steady_bubble: TimelineBubble
    peak_in_flight: list[int]
    peak_bytes: list[int]
    loss: float
    grads: dict[str, torch.Tensor]
    ledger_bytes: list[float | None]
    wire: list[Any]
    exp: dict = field(default_factory=dict)


def make_batch(m: int, micro_batch: int = 2, cfg: GPTConfig = PP_CONFIG, seed: int = 0):
    """The global batch (B = m * micro_batch rows) every rank regenerates identically."""
    return token_batches(1, m * micro_batch, cfg.seq_len, cfg.vocab_size, seed=seed)[0]


def pipeline_step(
    ctx: Any,
    schedule: str = "1f1b",
    m: int = 4,
    micro_batch: int = 2,
    cfg: GPTConfig = PP_CONFIG,
    balance: list[int] | None = None,
    order: Any = None,
    v: int | None = None,
    warmup_step: bool | None = None,
    deadlock_after_s: float | None = None,
    measure_bytes: bool = False,
    ledger: bool = False,
    repeats: int = 1,
    pp: int | None = None,
    seed: int = 0,
) -> StageRun:
    """One forward+backward step of a p-stage pipeline on this rank (p = ``pp``, default the
    world size; with pp < world size, world/pp replicas run the same pipeline side by side:
    Topology(dp=world/pp, pp=pp) says which ranks are neighbours).

    ``schedule``: a name of ``SCHEDULES``; ``v`` overrides its chunks per rank (interleaved).
    ``order``: a function (stage, p, m) -> ["F0", "B0", ...] that replaces the schedule.
    ``warmup_step`` runs one untimed step first (off by default).
    ``measure_bytes``: WireMeter around the timed step (p2p bytes the kernel counted);
    ``ledger``: a CommLedger too (what was called; its first use imports torch._dynamo).
    ``repeats``: timed steps (events tagged with "step"); ``merge`` keeps the least disturbed.
    """
    fn, v_default, _ = SCHEDULES[schedule]
    v = v or v_default
    rank, p = ctx.rank, pp or ctx.world_size
    topo = Topology(dp=ctx.world_size // p, pp=p)
    topo.check(ctx.world_size)
    s = topo.coords(rank)["pp"]  # this rank's position in its pipeline
    # A rank is forked from a process holding all of torch: a full garbage collection scans it
    # all (~0.3 s, at a random moment). Freezing those objects keeps that out of the timeline.
    gc.freeze()
    model = TinyGPT(cfg, seed=seed)  # same seed on every rank: the same weights
    stages = split_stages(model, p * v, balance)
    ids = [c * p + s for c in range(v)]  # loop placement: chunk c is stage c*p + s
    inputs, targets = make_batch(m, micro_batch, cfg, seed)
    shape = (micro_batch, cfg.seq_len, cfg.d_model)
    warmup_step = bool(warmup_step)
    timeline, events = Timeline(ctx), []
    for step in range(-1 if warmup_step else 0, repeats):
        # the untimed warm-up step (real compute) keeps first-call allocations out of the timeline
        base = next(_STEPS) * _TAGS_PER_STEP
        chunks = [
            StageWorker(
                stages[k],
                k,
                p * v,
                *pipeline_neighbours(topo, rank, k, p * v),
                inputs.chunk(m),
                targets.chunk(m),
                shape,
                base,
                deadlock_after_s,
            )
            for k in ids
        ]
        timed = step >= 0
        if timed:
            timeline.events = []
            obs = StageObserver(timeline, chunks)
            model.zero_grad(set_to_none=True)
            dist.barrier()  # every rank starts the timed step together
        with _bytes_meters(ctx, timed and measure_bytes, timed and ledger) as (calls, wire):
            if order is not None:
                from_order(chunks, order(s, p, m))
            else:
                fn(chunks if v > 1 else chunks[0])
            for w in chunks:
                w.finish()
        events += [dict(e, step=step) for e in timeline.events] if timed else []
    own = {id(q) for k in ids for q in stages[k].parameters()}
    grads = {n: q.grad.clone() for n, q in model.named_parameters() if id(q) in own}
    last = chunks[-1] if chunks[-1].last else None
    return StageRun(
        events,
        obs.peak_in_flight,
        obs.peak_bytes,
        last.loss if last else None,
        grads,
        calls.bytes_sent() if calls else None,
        wire.result() if wire else None,
    )


@contextmanager
def _bytes_meters(ctx: Any, wire: bool, ledger: bool) -> Iterator[tuple[Any, Any]]:
    with (
        CommLedger() if ledger else nullcontext() as calls,
        WireMeter(ctx) if wire else nullcontext() as meter,
    ):
        yield calls, meter


def pp_worker(ctx: Any, experiments: list[dict]) -> list[StageRun]:
    """Several pipeline experiments in ONE launch (each dict = pipeline_step keyword args)."""
    try:
        return [pipeline_step(ctx, **exp) for exp in experiments]
    finally:
        gc.unfreeze()  # pipeline_step froze what existed; a warm rank runs other work next


def merge(per_rank: Sequence[StageRun], exp: dict) -> PipelineRun:
    """Combine the ranks' results of one experiment (times shifted so the step starts at 0).
    Of several timed steps it keeps the one with the least idle time: a busy machine's stalls
    (a rank not scheduled for tens of ms) only ever ADD idle time to a step."""
    steps: dict[int, list[dict]] = {}
    for e in (e for r in per_rank for e in r.events):
        steps.setdefault(e["step"], []).append(e)
    schedule = exp.get("schedule", "1f1b")
    window = "rank" if schedule == "zb-h2" else "global"
    events = min(steps.values(), key=lambda ev: _idle(ev, window))
    t0 = min(e["start"] for e in events)
    events = [dict(e, start=e["start"] - t0, end=e["end"] - t0) for e in events]
    return PipelineRun(
        schedule,
        exp.get("pp") or len(per_rank),
        exp.get("m", 4),
        exp.get("v") or SCHEDULES[schedule][1],
        events,
        bubble_from_timeline(events),
        bubble_from_timeline(events, window="rank"),
        [r.peak_in_flight for r in per_rank],
        [r.peak_bytes for r in per_rank],
        next(r.loss for r in per_rank if r.loss is not None),
        {n: g for r in per_rank for n, g in r.grads.items()},
        [r.ledger_bytes for r in per_rank],
        [r.wire for r in per_rank],
        dict(exp),
    )


def _idle(events: list[dict], window: str) -> float:
    b = bubble_from_timeline(events, window=window)
    return b.mean if window == "global" else b.max


def run_pipeline(
    experiments: list[dict],
    world_size: int,
    cluster: twin.Cluster | None = None,
    scale: twin.Scale | None = None,
    **run_kwargs: Any,
) -> list[PipelineRun]:
    """Launch ``pp_worker`` on world_size ranks; one merged PipelineRun per experiment. With
    ``cluster`` the ranks run on the emulated cluster (``twin.emulate``): every time in the
    runs is EMULATED seconds (``scale``: the FLOPs and bytes charged, see pipeline_scale)."""
    from lab_utils.runtime.launch import oversubscription_note, run

    run_kwargs = {"quiet": True, **run_kwargs}
    if cluster is not None:
        res = twin.emulate(
            pp_worker, world_size, cluster, experiments, scale=scale, **run_kwargs
        ).results
    else:
        if note := oversubscription_note(world_size, "gloo"):
            print(f"[pp] real-compute mode: {note}")
        res = run(pp_worker, world_size, experiments, **run_kwargs)
    return [merge([res[r][k] for r in range(world_size)], exp) for k, exp in enumerate(experiments)]


def pipeline_cluster(
    preset: str = "DGX H100", p: int = 4, across_nodes: bool = False
) -> twin.Cluster:
    """The lab's emulated cluster: p GPUs of ``preset`` in one node (stages talk over NVLink),
    or one per node (every stage boundary crosses the network)."""
    return (
        twin.Cluster.preset(preset, nodes=p, gpus_per_node=1)
        if across_nodes
        else twin.Cluster.preset(preset, nodes=1, gpus_per_node=p)
    )


def pipeline_scale(cfg: GPTConfig = PP_CONFIG, micro_batch: int = 2) -> twin.Scale:
    """Every FLOP and byte charged as a full-width layer's (h = 4096, s = 2048, one sequence
    per micro-batch; lab 06's ``layer_scale``): a stage's compute and its messages keep a real
    model's proportions while the tiny model does the math."""
    return layer_scale(cfg, micro_batch)


def reference_grads(
    m: int = 4, micro_batch: int = 2, cfg: GPTConfig = PP_CONFIG, seed: int = 0
) -> tuple[float, dict[str, torch.Tensor]]:
    """Single process, whole batch: the loss and d loss / d param every pipeline must match."""
    model = TinyGPT(cfg, seed=seed)
    inputs, targets = make_batch(m, micro_batch, cfg, seed)
    loss = lm_loss(model(inputs), targets)
    loss.backward()
    return loss.item(), {n: q.grad.clone() for n, q in model.named_parameters()}


def grad_error(run: PipelineRun, ref_grads: dict[str, torch.Tensor]) -> float:
    """Largest |pipeline gradient - reference| over all parameters (every one must be there)."""
    if set(run.grads) != set(ref_grads):
        raise AssertionError(f"parameters missing or doubled: {set(run.grads) ^ set(ref_grads)}")
    return max((run.grads[n] - g).abs().max().item() for n, g in ref_grads.items())


def p2p_bytes_formula(
    schedule: str,
    p: int,
    m: int,
    micro_batch: int = 2,
    cfg: GPTConfig = PP_CONFIG,
    v: int | None = None,
) -> list[float]:
    """Bytes each rank sends per step (formula): m messages of b*T*C*4 bytes (fp32) per stage
    boundary and direction it sends over: forward from every stage but the last, backward
    from every stage but the first. v chunks per rank: v times the boundaries."""
    v = v or SCHEDULES[schedule][1]
    msg = pp_bytes_per_microbatch(micro_batch, cfg.seq_len, cfg.d_model, 4)
    n = p * v
    return [m * msg * sum((k < n - 1) + (k > 0) for k in range(r, n, p)) for r in range(p)]


def stage_compute_costs(
    cfg: GPTConfig,
    p: int,
    micro_batch: int = 2,
    repeats: int = 15,
    balance: list[int] | None = None,
) -> list[float]:
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
