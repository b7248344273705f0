"""Lab 07's numbers side by side: each schedule's formula next to its measurement, as table rows.

    bubble_formula(schedule, p, m, v)    idle fraction of the step (t_f = T_B = T_W, t_b = 2 t_f)
    in_flight_formula(schedule, p, m, v) activations each stage holds at its peak, in micro-batches
                                         of one stage (interleaved chunks count 1/v each)
    measured_bubble(run), measured_in_flight(run)   the matching measurements of a PipelineRun
    stage_costs(run), op_rows(runs)      seconds each rank computed; per-op means and the step
    schedule_rows / grad_rows / bytes_rows   for lab_utils.viz.show_table (SCHEDULE_FMT: how
                                         the notebook prints schedule_rows)
    in_flight_rows, spread_rows, steady_rows, uneven_rows, torch_rows   the rows of sections 7-10

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

from typing import Any, Mapping, Sequence

import torch

from lab_utils.calc.pipeline import bubble, peak_in_flight

# how the notebook prints schedule_rows: three decimals, the difference signed
SCHEDULE_FMT = {"formula": "{:.3f}", "measured": "{:.3f}", "diff": "{:+.3f}"}


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


def in_flight_rows(timed: Mapping[str, Any], p: int, m: int) -> list[dict]:
    """Lab 07 section 7: per schedule, the activations each stage holds at its peak (formula
    beside what the observer counted), in micro-batches of one stage."""
    return [
        {
            "schedule": s,
            "in flight (formula)": str(in_flight_formula(s, p, m, r.v)),
            "in flight (measured)": str(measured_in_flight(r)),
        }
        for s, r in timed.items()
    ]


SPREAD_FMT = {
    c: "{:.3f}"
    for c in ("one node (NVLink)", "one GPU per node (InfiniBand)", "formula (free messages)")
}


def spread_rows(node: Mapping[str, Any], spread: Mapping[str, Any], p: int, m: int) -> list[dict]:
    """Lab 07 section 8: the bubble of the schedules run on both placements (``node``: one
    node, NVLink; ``spread``: one GPU per node, InfiniBand) beside the free-message formula."""
    return [
        {
            "schedule": s,
            "messages per step": 2 * m * (p * r.v - 1),
            "one node (NVLink)": measured_bubble(r),
            "one GPU per node (InfiniBand)": measured_bubble(spread[s]),
            "formula (free messages)": bubble_formula(s, p, m, r.v),
        }
        for s, r in node.items()
    ]


STEADY = "steady state (own span, slowest rank)"
STEADY_FMT = {"one step alone": "{:.3f}", STEADY: "{:.3f}", "formula": "{:.3f}"}


def steady_rows(runs: Sequence[Any], p: int, m: int) -> list[dict]:
    """Lab 07 section 8 (ZB-H2): one step alone vs the steady state (idle over each rank's own
    span, the slowest rank), beside the formula and the micro-batches in flight."""
    return [
        {
            "schedule": r.schedule,
            "one step alone": r.bubble.mean,
            STEADY: r.steady_bubble.max,
            "formula": bubble_formula(r.schedule, p, m),
            "in flight": str(r.peak_in_flight),
        }
        for r in runs
    ]


def uneven_rows(runs: Sequence[Any], cpu_costs: Sequence[float], p: int, m: int) -> list[dict]:
    """Lab 07 section 9: per run, the stage costs (emulated, and this machine's CPU time
    ``cpu_costs``, both relative to the cheapest stage), the emulated step beside GPipe's
    formula sum_s k_s + (m-1) max_s k_s and the same FLOPs balanced, and each rank's idle."""
    rows = []
    for r in runs:
        k = [c / m for c in stage_costs(r)]  # emulated seconds per micro-batch, by stage
        rows.append(
            {
                "schedule": r.schedule,
                "stage costs, emulated": str([round(c / min(k), 2) for c in k]),
                "stage costs, laptop CPU": str([round(c / min(cpu_costs), 2) for c in cpu_costs]),
                "step (emulated)": max(e["end"] for e in r.events),
                "GPipe formula": sum(k) + (m - 1) * max(k),
                "same FLOPs, balanced": (m + p - 1) * sum(k) / p,
                "idle per rank": str([round(b, 2) for b in r.bubble.per_rank.values()]),
            }
        )
    return rows


# torch's schedules that calc has a closed form for (ZB-V's: its steady state, t_w = t_f)
TORCH_CLOSED_FORMS = {
    "gpipe": "gpipe",
    "1f1b": "1f1b",
    "interleaved-1f1b": "interleaved",
    "zbv": "zb-v",
}


TORCH_FMT = {
    "|loss - ref|": "{:.1e}",
    "max |grad - ref|": "{:.1e}",
    **{c: "{:.3f}" for c in ("emulated", "replayed", "replayed, own span", "formula")},
}


def torch_rows(
    runs: Sequence[Any], ref_loss: float, ref_grads: dict[str, torch.Tensor], p: int, m: int
) -> list[dict]:
    """Lab 07 section 10: torch.distributed.pipelining's schedules against one process (loss,
    gradients), their idle fraction emulated and replayed (exact op times, free messages; also
    over each rank's own span), beside calc's closed form where there is one."""
    from lab_utils.calc import bubble_from_timeline
    from lab_utils.parallel.pipeline_parallel.torch_schedules import TORCH_SCHEDULES

    def formula(r: Any) -> float | None:
        if r.schedule not in TORCH_CLOSED_FORMS:
            return None
        extra = {"t_w": 1.0} if r.schedule == "zbv" else {"v": r.v}
        return bubble(TORCH_CLOSED_FORMS[r.schedule], p, m, **extra).of_total

    return [
        {
            "schedule": r.schedule,
            "class": TORCH_SCHEDULES[r.schedule][0],
            "v": r.v,
            "|loss - ref|": abs(r.loss - ref_loss),
            "max |grad - ref|": max(
                (r.grads[n] - g).abs().max().item() for n, g in ref_grads.items()
            ),
            "emulated": r.bubble.mean,
            "replayed": r.replayed_bubble.mean,
            "replayed, own span": bubble_from_timeline(r.replayed, window="rank").max,
            "formula": formula(r),
        }
        for r in runs
    ]
