"""Lab 07's numbers side by side: each schedule's formula next to its measurement, as table rows.

    bubble_formula(schedule, p, m, v)    idle fraction of the step (t_f = T_B = T_W, t_b = 2 t_f)
    in_flight_formula(schedule, p, m, v) activations each stage holds at its peak, in micro-batches
                                         of one stage (interleaved chunks count 1/v each)
    measured_bubble(run), measured_in_flight(run)   the matching measurements of a PipelineRun
    stage_costs(run), op_rows(runs)      seconds each rank computed; per-op means and the step
    schedule_rows / grad_rows / bytes_rows   for lab_utils.viz.show_table

The formulas are lab_utils.calc's (``bubble``, ``peak_in_flight``: Huang et al. 2019; Narayanan
et al. 2021 Sec. 2.2; Korthikanti et al. 2022 Sec. 4; Qi et al. 2023 Sec. 3), with two cases
this lab derives for its ZB-H2 (``schedules.zero_bubble`` with k = 2):
  * bubble: (p-1)(t_f + T_B - 2 T_W) is the steady state once m >= 2p - 1: stage 0's first B can
    start only 2p - 1 op times after its first F (F0 down p stages, B0 back up p - 1), and it
    needs that many forwards to fill the wait. With fewer it idles 2p - 1 - m op times per step
    (t_f = T_B = T_W), and in steady state every rank keeps that pace.
  * memory: every stage defers its W's by 2(p-1) rounds, so EVERY stage holds min(2p - 1, m)
    micro-batches. calc.peak_in_flight gives 2(p-s) - 1 on stage s, the count when the stage's
    first B arrives; running each W right after its B to keep that count brings back idle time
    on this round structure (tests/test_pp.py::test_zb_h2_needs_its_deferred_w).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from lab_utils.calc.pipeline import bubble, peak_in_flight


def bubble_formula(schedule: str, p: int, m: int, v: int = 1) -> float:
    """Idle fraction of the step (of_total) by the closed forms, t_f = T_B = T_W; ZB-H2: of
    the steady state (consecutive steps overlap), with the m < 2p - 1 case derived above."""
    if schedule == "zb-h2" and m < 2 * p - 1:
        idle = 2 * p - 1 - m  # in op times
        return idle / (3 * m + idle)
    if schedule in ("zb-h1", "zb-h2"):
        return bubble(schedule, p, m, t_f=1.0, t_b=2.0, t_w=1.0).of_total
    return bubble(schedule, p, m, v if schedule == "interleaved" else 1).of_total


def in_flight_formula(schedule: str, p: int, m: int, v: int = 1) -> list[float]:
    """Peak activations per stage, in micro-batches of one stage (calc.peak_in_flight; ZB-H2:
    min(2p - 1, m) on every stage, see the module docstring)."""
    if schedule == "zb-h2":
        return [float(min(2 * p - 1, m))] * p
    return [
        peak_in_flight(schedule, p, m, s, v if schedule == "interleaved" else 1) for s in range(p)
    ]


def measured_in_flight(run: Any) -> list[float]:
    """What the ranks counted, in micro-batches of one stage (an interleaved chunk is 1/v)."""
    return [n / run.v for n in run.peak_in_flight]


def measured_bubble(run: Any) -> float:
    """The measured counterpart of ``bubble_formula``: the mean idle fraction of the step,
    or for ZB-H2 the steady state's (idle / each rank's own span, the slowest rank)."""
    return run.steady_bubble.max if run.schedule == "zb-h2" else run.bubble.mean


def stage_costs(run: Any) -> list[float]:
    """Seconds each rank computed in the step (the sum of its F, B and W spans): on the
    emulated clock, the FLOPs its stage really ran at the GPU's rate."""
    busy = [0.0] * run.p
    for e in run.events:
        busy[e["rank"] % run.p] += e["end"] - e["start"]
    return busy


def op_rows(runs: Sequence[Any]) -> list[dict]:
    """Per run and rank: the mean F, B and W (ms), the compute and the step (ms): where a
    schedule's time goes on the emulated clock."""
    rows = []
    for r in runs:
        step, busy = max(e["end"] for e in r.events), stage_costs(r)
        for rank in range(r.p):
            mine = [e for e in r.events if e["rank"] % r.p == rank]
            mean = {k: [e["end"] - e["start"] for e in mine if e["name"] == k] for k in "FBW"}
            rows.append(
                {
                    "schedule": label(r),
                    "rank": rank,
                    **{k: 1e3 * sum(d) / len(d) if d else None for k, d in mean.items()},
                    "computed": 1e3 * busy[rank],
                    "step": 1e3 * step,
                }
            )
    return rows


def label(run: Any) -> str:
    return run.schedule + (f" (v={run.v})" if run.v > 1 else "")


def _fmt(xs: Sequence[float]) -> str:
    return "[" + ", ".join(f"{x:g}" for x in xs) + "]"


def schedule_rows(runs: Sequence[Any]) -> list[dict]:
    """Bubble and memory per run: formula next to measured (simulated compute)."""
    rows = []
    for r in runs:
        f = bubble_formula(r.schedule, r.p, r.m, r.v)
        meas = measured_bubble(r)
        rows.append(
            {
                "schedule": label(r),
                "m": r.m,
                "bubble window": "steady" if r.schedule == "zb-h2" else "step",
                "formula": f,
                "measured": meas,
                "diff": meas - f,
                "in flight (formula)": _fmt(in_flight_formula(r.schedule, r.p, r.m, r.v)),
                "in flight (measured)": _fmt(measured_in_flight(r)),
            }
        )
    return rows


def grad_rows(
    runs: Sequence[Any], ref_loss: float, ref_grads: dict[str, torch.Tensor]
) -> list[dict]:
    """Largest gradient difference and loss difference to the single-process reference."""
    from lab_utils.experiments.lab07.pipeline import grad_error

    return [
        {
            "schedule": label(r),
            "split": "uneven" if r.exp.get("balance") else "even",
            "max |grad - ref|": grad_error(r, ref_grads),
            "|loss - ref|": abs(r.loss - ref_loss),
        }
        for r in runs
    ]


def bytes_rows(runs: Sequence[Any], micro_batch: int = 2) -> list[dict]:
    """p2p bytes ALL ranks sent in one step: formula vs wire (what the kernel counted)."""
    from lab_utils.experiments.lab07.pipeline import p2p_bytes_formula
    from lab_utils.measure import GLOO_HEADER_BYTES

    rows = []
    for r in runs:
        formula = sum(p2p_bytes_formula(r.schedule, r.p, r.m, micro_batch, v=r.v))
        sent = [w.sent for w in r.wire if w is not None]
        wire = sum(sent) if sent and None not in sent else None
        rows.append(
            {
                "schedule": label(r),
                "messages": 2 * r.m * (r.p * r.v - 1),
                "formula": round(formula),
                "wire": wire,
                "wire / formula": wire / formula if wire else None,
                "headers (48 B)": (wire - formula) / GLOO_HEADER_BYTES if wire else None,
            }
        )
    return rows
