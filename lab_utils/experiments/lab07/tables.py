"""Lab 07's numbers side by side: each schedule's formula next to its measurement, as table rows.

    bubble_formula(schedule, p, m, v)    idle fraction of the step (t_f = T_B = T_W, t_b = 2 t_f)
    in_flight_formula(schedule, p, m, v) micro-batches (x chunks) each stage holds at its peak
    measured_bubble(run)                 the matching measured number of a PipelineRun
    schedule_rows / grad_rows / bytes_rows   rows for lab_utils.viz.show_table

Formulas (Huang et al. 2019; Narayanan et al. 2021 Sec. 2.2; Korthikanti et al. 2022 Sec. 4;
Qi et al. 2023 Sec. 3.1), as lab_utils.calc.bubble states them, plus two this lab derives:
  * ZB-H2's steady-state bubble (p-1)(t_f + T_B - 2 T_W) needs m >= 2p - 1: stage 0's first B
    can start only 2p - 1 op times after its first F (F0 down p stages, B0 back up p - 1), and
    it needs that many forwards to fill the wait. With fewer it idles 2p - 1 - m op times per
    step (t_f = T_B = T_W), and in steady state every rank keeps its pace.
  * in flight: GPipe m; 1F1B min(p - s, m); interleaved (in chunk activations, 1/v of a stage's
    each) 2(p - 1 - r) + (v - 1) p + 1 on rank r, all m v when m = p (Megatron runs every
    forward first then): p v + p - 1 on rank 0, i.e. 1 + (p-1)/(p v) times 1F1B's p stage
    activations; ZB-H1 min(p, m) on every stage; ZB-H2 min(2p - 1, m).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from lab_utils.calc.activations import in_flight_microbatches
from lab_utils.calc.pipeline import bubble


def bubble_formula(schedule: str, p: int, m: int, v: int = 1) -> float:
    """Idle fraction of the step (of_total) by the closed forms, t_f = T_B = T_W; ZB-H2: of
    the steady state (consecutive steps overlap), with the m < 2p - 1 case derived above."""
    if schedule == "zb-h2" and m < 2 * p - 1:
        idle = 2 * p - 1 - m  # in op times
        return idle / (3 * m + idle)
    return bubble(schedule, p, m, v if schedule == "interleaved" else 1, t_w=1.0).of_total


def in_flight_formula(schedule: str, p: int, m: int, v: int = 1) -> list[int]:
    """Peak micro-batches each stage (rank) holds; interleaved: in chunk activations."""
    if schedule in ("gpipe", "1f1b"):
        return [in_flight_microbatches(schedule, p, m, s) for s in range(p)]
    if schedule == "interleaved":
        return [m * v if m == p else min(2 * (p - 1 - r) + (v - 1) * p + 1, m * v)
                for r in range(p)]
    return [min((2 * p - 1) if schedule == "zb-h2" else p, m)] * p


def measured_bubble(run: Any) -> float:
    """The measured counterpart of ``bubble_formula``: the mean idle fraction of the step,
    or for ZB-H2 the steady state's (idle / each rank's own span, the slowest rank)."""
    return run.steady_bubble.max if run.schedule == "zb-h2" else run.bubble.mean


def label(run: Any) -> str:
    return run.schedule + (f" (v={run.v})" if run.v > 1 else "")


def schedule_rows(runs: Sequence[Any]) -> list[dict]:
    """Bubble and memory per run: formula next to measured (simulated compute)."""
    rows = []
    for r in runs:
        f = bubble_formula(r.schedule, r.p, r.m, r.v)
        meas = measured_bubble(r)
        rows.append({"schedule": label(r), "m": r.m,
                     "bubble window": "steady" if r.schedule == "zb-h2" else "step",
                     "formula": f, "measured": meas, "diff": meas - f,
                     "in flight (formula)": str(in_flight_formula(r.schedule, r.p, r.m, r.v)),
                     "in flight (measured)": str(r.peak_in_flight)})
    return rows


def grad_rows(runs: Sequence[Any], ref_loss: float, ref_grads: dict[str, torch.Tensor]) -> list[dict]:
    """Largest gradient difference and loss difference to the single-process reference."""
    from lab_utils.experiments.lab07.pipeline import grad_error

    return [{"schedule": label(r), "split": "uneven" if r.exp.get("balance") else "even",
             "max |grad - ref|": grad_error(r, ref_grads), "|loss - ref|": abs(r.loss - ref_loss)}
            for r in runs]


def bytes_rows(runs: Sequence[Any], micro_batch: int = 2) -> list[dict]:
    """p2p bytes ALL ranks sent in one step: formula vs wire (what the kernel counted)."""
    from lab_utils.experiments.lab07.pipeline import p2p_bytes_formula
    from lab_utils.measure import GLOO_HEADER_BYTES

    rows = []
    for r in runs:
        formula = sum(p2p_bytes_formula(r.schedule, r.p, r.m, micro_batch, v=r.v))
        sent = [w.sent for w in r.wire if w is not None]
        wire = sum(sent) if sent and None not in sent else None
        rows.append({"schedule": label(r), "messages": 2 * r.m * (r.p * r.v - 1),
                     "formula": round(formula), "wire": wire,
                     "wire / formula": wire / formula if wire else None,
                     "headers (48 B)": (wire - formula) / GLOO_HEADER_BYTES if wire else None})
    return rows


def timing_note(rows: Sequence[dict], tol: float = 0.02) -> None:
    """A measured bubble more than ``tol`` off its formula on a shared machine is the machine,
    not the schedule: say so (printed) instead of failing."""
    import os

    worst = max((abs(r["diff"]) for r in rows), default=0.0)
    if worst <= tol:
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    note = (f"note: a measured bubble is {worst:.3f} off its formula. This machine is busy (load "
            f"average {load:.0f} on {os.cpu_count()} cores): a rank that wakes up late from its "
            "simulated compute delays its neighbours, which mostly adds idle time. "
            "benchmarks/bench_bubble.py keeps the best of 5 steps.")
    print(note)
