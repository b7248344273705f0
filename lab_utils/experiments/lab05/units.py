"""Lab 05 section 7: one FSDP step, unit by unit, on the emulated cluster's clock.

Our FSDP trains a TinyGPT for one step on ``lab_utils.twin``'s emulated cluster, watched from
outside: each block's forward and backward span from module hooks (``ModuleSpans``) read on
``twin.now()``, the rank's EMULATED clock (compute charged from the FLOPs each block ran), the
all-gathers and reduce-scatters from the emulation's communication stream, and the bytes of full
weights held each time a block starts computing. Nothing sleeps: a loaded machine gives the
same times, so which gather overlaps which block's compute is exact.

    unit_steps(ctx, cfg)   the rank worker (under twin.emulate): one step without prefetch and
                           one with, each between two ``twin.step()`` marks
    unit_timelines(em)     the run -> per rank {"no prefetch": UnitTimeline, "prefetch": ...}
    gathered_bytes(fsdp)   full weights a rank holds now (also the exercise's memory check)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lab_utils import twin
from lab_utils.data import shard_for_rank, token_batches
from lab_utils.experiments.common import emulated_window
from lab_utils.experiments.lab05.sharding import BF16, LR
from lab_utils.measure import model_state_bytes
from lab_utils.measure.spans import ModuleSpans
from lab_utils.models import GPTConfig, TinyGPT
from lab_utils.parallel.fsdp import FSDP, MixedPrecision
from lab_utils.reference import default_loss, make_optimizer


@dataclass
class UnitStep:
    """What one rank saw of one FSDP step (times: its emulated clock, seconds)."""

    compute: list[dict]  # each block's forward / backward span (ModuleSpans)
    held: list[tuple[float, int]]  # (time, bytes of full weights) as each block starts
    bounds: tuple[float, float]  # the step's start and end marks
    state_bytes: int  # shards + their grads + Adam m, v (model_state_bytes total)
    unit_numel: dict[str, int]
    root_bytes: tuple[int, ...]  # the root's all-gather (bf16) and reduce-scatter (fp32) sizes


@dataclass
class UnitTimeline:
    """One FSDP step on one rank, from 0 (emulated seconds)."""

    events: list[dict] | None  # rank 0: every rank's block spans and collectives, by lane
    held: list[tuple[float, int]]
    peak_held: int
    state_bytes: int
    # per pass: block all-gathers that STARTED before the block computing ahead of them had
    # finished (prefetch), and the all-gather time left exposed: how long, in total, a block's
    # weights were still arriving after the previous block finished (emulated seconds)
    overlapped: dict[str, int] = field(default_factory=dict)
    exposed_gather_s: dict[str, float] = field(default_factory=dict)
    unit_numel: dict[str, int] = field(default_factory=dict)


def gathered_bytes(fsdp: FSDP) -> int:
    """Bytes of full (unsharded) weights this rank holds now: gathered units, and the receive
    buffers of all-gathers still in flight (prefetch). Read from outside the technique."""
    held = sum(p.full.untyped_storage().nbytes() for u in fsdp.units for p in u.params)
    return held + sum(
        u.inflight[1].numel() * u.inflight[1].element_size()
        for u in fsdp.units
        if u.inflight is not None
    )


class _Spans:
    """Where ModuleSpans writes: compute spans on this rank's emulated clock."""

    def __init__(self, rank: int) -> None:
        self.rank, self.events = rank, []

    def now(self) -> float:
        return twin.now()

    def add(self, name: str, start: float, end: float, **meta: Any) -> None:
        self.events.append(
            dict(rank=self.rank, name=name, start=start, end=end, lane="compute", **meta)
        )


def unit_step(
    ctx: Any, cfg: GPTConfig, prefetch: bool, mp: MixedPrecision = BF16, global_batch: int = 8
) -> UnitStep:
    """One FSDP step of AdamW between two ``twin.step()`` marks, watched from outside."""
    if twin.now() is None:
        raise RuntimeError(
            "unit_step times FSDP on the emulated clock: launch it with twin.emulate"
        )
    batch = token_batches(1, global_batch, cfg.seq_len, cfg.vocab_size, seed=1)[0]
    x, y = shard_for_rank(batch, ctx.rank, ctx.world_size)
    fsdp = FSDP(TinyGPT(cfg, seed=0), ctx.group, mp=mp, prefetch=prefetch)
    opt = make_optimizer(fsdp.parameters(), "adamw", LR)
    spans, held = _Spans(ctx.rank), []
    blocks = {u.name: u.module for u in fsdp.units if u is not fsdp.root}
    watch = ModuleSpans(
        blocks, spans, on_start=lambda *_: held.append((twin.now(), gathered_bytes(fsdp)))
    )
    start = twin.step()
    default_loss(fsdp(x), y).backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    end = twin.step()
    watch.remove()
    root = sum(p.chunk for p in fsdp.root.params) * ctx.world_size
    return UnitStep(
        spans.events,
        held,
        (start, end),
        model_state_bytes(fsdp, opt)["total"],
        {u.name: sum(p.shape.numel() for p in u.params) for u in fsdp.units},
        (2 * root, 4 * root),
    )


def unit_steps(ctx: Any, cfg: GPTConfig, mp: MixedPrecision = BF16) -> dict[str, UnitStep]:
    """unit_step without and with prefetch, in one launch (run it with ``twin.emulate``)."""
    return {
        "no prefetch": unit_step(ctx, cfg, False, mp),
        "prefetch": unit_step(ctx, cfg, True, mp),
    }


def _gather_overlap(
    compute: list[dict], gathers: list[tuple[float, float]], blocks: list[str]
) -> tuple[dict[str, int], dict[str, float]]:
    """Pair each block's all-gather (start, end) with the compute span that runs before it.

    Issue order (with or without prefetch): the root, the blocks in forward order, then the
    blocks in backward order (last first). Forward: block i's gather against the end of block
    i-1's forward; backward: block i's gather against the end of block i+1's backward."""
    ends = {(e["name"], e["mb"]): e["end"] for e in compute}
    n = len(blocks)
    pairs = {
        "forward": [(gathers[1 + i], ends[("forward", blocks[i - 1])]) for i in range(1, n)],
        "backward": [(gathers[1 + n + j], ends[("backward", blocks[n - j])]) for j in range(1, n)],
    }
    overlapped = {k: sum(g[0] < end for g, end in v) for k, v in pairs.items()}
    exposed = {k: sum(max(0.0, g[1] - end) for g, end in v) for k, v in pairs.items()}
    return overlapped, exposed


def _events(em: twin.Emulation, steps: list[UnitStep]) -> list[dict]:
    """Every rank's block spans and collectives of one step, shifted to start at 0."""
    window = emulated_window(em, [s.bounds for s in steps])
    out = []
    for rank, (s, rec) in enumerate(zip(steps, window.records)):
        a = s.bounds[0]
        out += [dict(e, start=e["start"] - a, end=e["end"] - a) for e in s.compute]
        out += [
            dict(rank=rank, name=c["name"], start=c["start"], end=c["end"], lane="comm", mb=unit)
            for c in rec.spans
            if c["stream"] == "comm"
            for unit in ["root" if round(c["bytes"] / em.scale.bytes) in s.root_bytes else "block"]
        ]
    return sorted(out, key=lambda e: (e["start"], e["rank"]))


def unit_timelines(em: twin.Emulation) -> list[dict[str, UnitTimeline]]:
    """A ``unit_steps`` run, per rank and run ("no prefetch", "prefetch"): the step's events
    (rank 0 holds every rank's), the full weights held over time and at the peak, and which
    block all-gathers overlapped the block computing before them."""
    out: list[dict[str, UnitTimeline]] = [{} for _ in em.records]
    for name in em.results[0]:
        steps = [res[name] for res in em.results]
        events = _events(em, steps)
        for rank, s in enumerate(steps):
            mine = [e for e in events if e["rank"] == rank]
            gathers = sorted((e["start"], e["end"]) for e in mine if e["name"] == "all_gather")
            compute = [e for e in mine if e["lane"] == "compute"]
            blocks = [u for u in s.unit_numel if u != "root"]
            overlapped, exposed = _gather_overlap(compute, gathers, blocks)
            held = [(t - s.bounds[0], b) for t, b in s.held]
            out[rank][name] = UnitTimeline(
                events if rank == 0 else None,
                held,
                max(b for _, b in held),
                s.state_bytes,
                overlapped,
                exposed,
                s.unit_numel,
            )
    return out
