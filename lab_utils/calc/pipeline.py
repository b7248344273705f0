"""Pipeline schedules in closed form: bubble, peak in-flight micro-batches, p2p traffic (lab 07).

Notation: p stages (ranks), m micro-batches per step, v model chunks per rank (interleaving),
t_f / t_b the forward / full backward time of one micro-batch on one stage; zero-bubble
schedules split the backward into B (input gradient, T_B = t_b - t_w) and W (weight gradient,
T_W = t_w). M_B is the activation memory of one micro-batch on one stage (L/p layers).

Two ways to state the same bubble, both returned by ``bubble``:
    of_ideal = bubble time / ideal compute time      (p-1)/m        for GPipe and 1F1B
    of_total = bubble time / total (wall) time       (p-1)/(m+p-1)  for GPipe and 1F1B
GPipe and 1F1B have the SAME bubble; 1F1B only lowers activation memory (p vs m in flight).

    schedule      bubble (idle per rank)             peak in flight on stage s (x M_B)
    gpipe         (p-1)(t_f+t_b)                     m
    1f1b          (p-1)(t_f+t_b)                     min(p-s, m)
    interleaved   (p-1)(t_f+t_b)/v                   Megatron warm-up + 1 chunks, / v
    zb-h1         (p-1)(t_f+T_B-T_W)                 min(p, m)       (every stage)
    zb-h2         (p-1)(t_f+T_B-2T_W), >= 0          min(2(p-s)-1, m)
    zb-v          0 when t_f = T_B = T_W             min(p, m)       (every stage)

The simulator (``schedule``, ideal timelines) lives in ``calc.pipeline_sim``; both are
imported here, so ``calc.pipeline.schedule`` and ``calc.pipeline.Event`` keep working.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import (
    backward_split,
    choice,
    index,
    interleaved_shape,
    one_chunk,
    pos_int,
    pos_num,
)
from lab_utils.calc.pipeline_sim import Event, Schedule, schedule  # noqa: F401 (re-export)

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v")


@dataclass(frozen=True)
class Bubble:
    """Bubble of one schedule. ``of_ideal``: idle / ideal compute; ``of_total``: idle / wall
    time, i.e. the fraction of the step a rank sits idle (of_ideal / (1 + of_ideal))."""

    schedule: str
    of_ideal: float
    of_total: float


def _inputs(name: str, p: object, m: object, v: object) -> tuple[int, int, int]:
    """Shared checks: the schedule name, p, m, and v (chunks: interleaved >= 2, zb-v 2)."""
    choice("schedule", name, SCHEDULES)
    p, m, v = pos_int("p", p), pos_int("m", m), pos_int("v", v)
    if name == "interleaved":
        interleaved_shape(p, m, v)
    elif name == "zb-v":
        if v not in (1, 2):
            raise ValueError(
                f"ZB-V always places 2 chunks per rank in a V (Qi et al. 2023); "
                f"leave v at 1 or pass v=2, got v={v}"
            )
    else:
        one_chunk(v)
    return p, m, v


def bubble(
    schedule: str,
    p: int,
    m: int,
    v: int = 1,
    t_f: float = 1.0,
    t_b: float = 2.0,
    t_w: float | None = None,
) -> Bubble:
    """Closed-form pipeline bubble (assumes m >= p; idle time per rank, see module table).

        gpipe, 1f1b : (p-1)(t_f + t_b)          -> of_ideal (p-1)/m
                      (Huang et al. 2019 Sec. 2; Narayanan et al. 2021 Sec. 2.2.1)
        interleaved : (p-1)(t_f + t_b) / v      -> of_ideal (p-1)/(v m)
                      (Narayanan et al. 2021 Sec. 2.2.2; needs m % p == 0)
        zb-h1       : (p-1)(t_f + T_B - T_W)    -> 1/3 of 1F1B when t_f = T_B = T_W
        zb-h2       : (p-1)(t_f + T_B - 2T_W), floored at 0 -> 0 when they are equal
                      (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", Sec. 2, Table 2)
        zb-v        : 0 when t_f = T_B = T_W (Qi et al. 2023, ZB-V section; the authors give
                      no closed form for unequal times: simulate it, this function refuses)

    T_B = t_b - t_w is the input-gradient pass, T_W = t_w (default t_b / 2). ``t_w`` is only
    accepted by the zero-bubble schedules. of_total = idle / (idle + m (t_f + t_b)). Lab 07.
    """
    p, m, v = _inputs(schedule, p, m, v)
    t_f, t_b = pos_num("t_f", t_f), pos_num("t_b", t_b)
    ideal = m * (t_f + t_b)
    if schedule in ("gpipe", "1f1b", "interleaved"):
        if t_w is not None:
            raise ValueError(
                f"t_w only applies to the zero-bubble schedules (B and W split); "
                f"leave it out for {schedule!r}"
            )
        idle = (p - 1) * (t_f + t_b) / (v if schedule == "interleaved" else 1)
    elif schedule == "zb-v":
        w = backward_split(t_b, t_w)
        if abs(t_f - (t_b - w)) > 1e-9 * t_f or abs(w - (t_b - w)) > 1e-9 * t_f:
            raise ValueError(
                f"ZB-V's bubble is known in closed form only for equal F, B and W "
                f"times (then it is 0; Qi et al. 2023); got t_f={t_f:g}, "
                f"T_B={t_b - w:g}, T_W={w:g}. Pass t_b = 2 t_f and t_w = t_f, or "
                "simulate the schedule"
            )
        idle = 0.0
    else:
        w = backward_split(t_b, t_w)
        n_w = 1 if schedule == "zb-h1" else 2
        idle = max(0.0, (p - 1) * (t_f + (t_b - w) - n_w * w))
    return Bubble(schedule, idle / ideal, idle / (idle + ideal))


def peak_in_flight(schedule: str, p: int, m: int, stage: int = 0, v: int = 1) -> float:
    """Activations stage ``stage`` holds at its peak, in micro-batches of one stage (M_B).

    A micro-batch is in flight on a stage from its forward until its last backward op (B,
    or W for zero-bubble schedules: the weight gradient still needs the layer inputs).
        gpipe       m: every forward before any backward (Huang et al. 2019)
        1f1b        min(p - s, m): s warm-up forwards fewer on later stages (Narayanan 2021)
        interleaved Megatron's warm-up, 2(p-s-1) + (v-1)p chunk forwards (all m v when
                    m == p), plus the one in the steady state, each chunk 1/v of a stage:
                    stage 0 holds p (1 + (p-1)/(p v)) (Korthikanti et al. 2022 Sec. 4), the
                    last stage p - (p-1)/v: interleaving RAISES memory on every stage
        zb-h1       min(p, m) on every stage (Qi et al. 2023 Sec. 2.1: 1F1B's peak, p M_B)
        zb-h2       min(2(p-s) - 1, m): stage s starts s t_f late and meets its first B at
                    (2p-1-s) t_f, forwarding all the while (Qi et al. Fig. 3; (2p-1) M_B)
        zb-v        min(p, m) on every stage: 2 half-size chunks (Qi et al. ZB-V section)
    Returns a float (interleaved is fractional). The pipeline-parallel labs compare it with
    the peak measured on each rank. Lab 07.
    """
    p, m, v = _inputs(schedule, p, m, v)
    s = index("stage", stage, p, f"p={p}")
    if schedule == "gpipe":
        return float(m)
    if schedule == "1f1b":
        return float(min(p - s, m))
    if schedule == "interleaved":
        total = m * v
        warm = total if m == p else min(2 * (p - s - 1) + (v - 1) * p, total)
        return min(warm + 1, total) / v
    if schedule == "zb-h2":
        return float(min(2 * (p - s) - 1, m))
    return float(min(p, m))  # zb-h1, zb-v


def p2p_factor(schedule: str, v: int = 1) -> float:
    """Stage-to-stage activation traffic per step relative to 1F1B: v for interleaved (each
    micro-batch crosses v p - 1 chunk boundaries instead of p - 1; Narayanan et al. 2021 Sec.
    2.2.2), 2 for ZB-V (two chunks per rank, Qi et al. 2023), 1 otherwise. Lab 07."""
    choice("schedule", schedule, SCHEDULES)
    v = pos_int("v", v)
    return {"interleaved": float(v), "zb-v": 2.0}.get(schedule, 1.0)


@dataclass(frozen=True)
class PipelineFacts:
    """One schedule's closed forms side by side: bubble, peak in flight on every stage
    (x M_B, stage 0 first), and p2p traffic relative to 1F1B."""

    schedule: str
    bubble: Bubble
    peak_per_stage: tuple[float, ...]
    p2p_factor: float

    @property
    def peak(self) -> float:
        return max(self.peak_per_stage)


def pipeline_facts(
    schedule: str,
    p: int,
    m: int,
    v: int = 1,
    t_f: float = 1.0,
    t_b: float = 2.0,
    t_w: float | None = None,
) -> PipelineFacts:
    """``bubble``, ``peak_in_flight`` for every stage and ``p2p_factor`` in one call, e.g.
    to fill a comparison table of all six schedules. Lab 07."""
    b = bubble(schedule, p, m, v, t_f, t_b, t_w)
    if p > 100_000:
        raise ValueError(
            f"p={p} stages is too many to list one by one (at most 100000); "
            "call peak_in_flight for the stages you need"
        )
    peaks = tuple(peak_in_flight(schedule, p, m, s, v) for s in range(p))
    return PipelineFacts(schedule, b, peaks, p2p_factor(schedule, v))
