"""Lab 09's tables and figures: rows for ``viz.show_table`` and plotly figures, built here so
the notebook keeps the runs, the numbers compared and the predictions in sight.

    routing_rows, load_rows          one routed batch: each token's experts, each expert's load
    ep_rows, EP_FMT                  EP against the single-process layer (errors, all-to-alls)
    ep_bytes_rows                    bytes one rank sends, ep = 4: formula, ledger, splits, wire
    mesh_loss_rows, phase_rows       the (dp, ep) mesh against one process; bytes by phase
    balance_figure, skew_rows        assignments per expert with and without the balancing loss
    capacity_rows, capacity_figure   drops and the padded buffer against the capacity factor
    state_rows, ep_memory_figure     DeepSeek-V3's state per GPU by layout and by EP degree
    plan_row, PLAN_FMT, rank_of_published   the MoE planner's layouts beside the published one
    traffic_rows                     all-to-all vs ZeRO-1 sync bytes per GPU, DeepSeek-V3-like
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import plotly.graph_objects as go

from lab_utils.calc import GB, dp_bytes_per_rank, moe_memory_per_rank
from lab_utils.measure import GLOO_HEADER_BYTES


def routing_rows(r: Any) -> list[dict]:
    """Each token's two experts, their gates and whether capacity kept them (``EP.route``)."""
    return [
        {
            "token": t,
            "1st expert": int(r.expert_idx[t, 0]),
            "gate 1": r.gate[t, 0].item(),
            "kept 1": bool(r.keep[t, 0]),
            "2nd expert": int(r.expert_idx[t, 1]),
            "gate 2": r.gate[t, 1].item(),
            "kept 2": bool(r.keep[t, 1]),
        }
        for t in range(r.expert_idx.shape[0])
    ]


def load_rows(load: Sequence[int], kept: Sequence[int]) -> list[dict]:
    """Assignments, kept and dropped per expert."""
    return [
        {"expert": e, "assignments": int(a), "kept": int(k), "dropped": int(a - k)}
        for e, (a, k) in enumerate(zip(load, kept))
    ]


EP_FMT = {c: "{:.1e}" for c in ("max |y - dense|", "grad tokens", "grad experts", "grad router")}


def ep_rows(rows: Sequence[Any]) -> list[dict]:
    """EP vs the single-process layer, per EP size and rank: max abs differences of the output
    and of the gradients, and the all-to-alls each direction ran."""
    return [
        {
            "EP ranks": row.ep,
            "rank": row.rank,
            "max |y - dense|": row.out_err,
            "grad tokens": row.grad_err["tokens"],
            "grad experts": row.grad_err["experts"],
            "grad router": row.grad_err["router"],
            "all-to-alls fwd / bwd": f"{row.a2a_calls['forward']} / {row.a2a_calls['backward']}",
        }
        for row in rows
    ]


def ep_bytes_rows(four: Sequence[Any]) -> list[dict]:
    """Bytes one rank sends at ep = 4: the dispatch all-to-all and the whole forward (counts +
    dispatch + combine) by the uniform formula, the ledger, the split sizes and the wire; the
    last column counts gloo's 48-byte headers in the difference."""
    rows = []
    for row in four:
        ledger = row.bytes_ledger
        fwd_splits = sum(row.bytes_splits.values())  # counts + dispatch + combine payloads
        rows.append(
            {
                "rank": row.rank,
                "dispatch: formula (uniform)": row.bytes_uniform,
                "dispatch: ledger": ledger["dispatch"],
                "dispatch: splits": row.bytes_splits["dispatch"],
                "fwd: formula (uniform)": row.bytes_splits["counts"] + 2 * row.bytes_uniform,
                "fwd: ledger": ledger["counts"] + ledger["dispatch"] + ledger["combine"],
                "fwd: splits": fwd_splits,
                "fwd: wire": row.bytes_wire["forward"],
                "(wire - splits) / 48 B": (row.bytes_wire["forward"] - fwd_splits)
                / GLOO_HEADER_BYTES,
            }
        )
    return rows


def mesh_loss_rows(mesh: Sequence[Any]) -> list[dict]:
    """Loss per step of the (dp, ep) mesh (rank 0, and the largest difference over ranks)
    beside the single-process reference."""
    r0 = mesh[0]
    return [
        {
            "step": i,
            "reference (1 process)": ref,
            "EP x DP (rank 0)": r0.losses[i],
            "max |diff| over ranks": max(abs(r.losses[i] - ref) for r in mesh),
        }
        for i, ref in enumerate(r0.ref_losses)
    ]


def phase_rows(r0: Any) -> list[dict]:
    """What one rank sent in the last step, by phase: the collectives, formula, ledger, wire."""
    return [
        {
            "phase": phase,
            "collectives": ", ".join(f"{n} {op}" for op, n in c["ops"].items()),
            "formula": r0.formula.get(phase),
            "ledger": c["bytes"],
            "wire": c["wire"],
        }
        for phase, c in r0.comm.items()
    ]


def skew(counts: Sequence[float]) -> float:
    """Load imbalance: the busiest expert's load over the mean (1 = even)."""
    return max(counts) / (sum(counts) / len(counts))


def skew_rows(bal: Any, runs: Sequence[tuple[float, str]]) -> list[dict]:
    """Per balance run (coefficient, name): the imbalance at the first and last step and the
    auxiliary loss at the last."""
    return [
        {
            "run": name,
            "max / mean load, first step": skew(bal.tokens_per_expert[coef][0]),
            "max / mean load, last step": skew(bal.tokens_per_expert[coef][-1]),
            "aux loss, last step": bal.aux_loss[coef][-1],
        }
        for coef, name in runs
    ]


def balance_figure(bal: Any, runs: Sequence[tuple[float, str]], steps: int) -> go.Figure:
    """Assignments per expert at the first step and after ``steps`` of each run, against an
    even load."""
    first = bal.tokens_per_expert[0.0][0]
    experts = [f"expert {e}" for e in range(len(first))]
    fig = go.Figure(
        go.Bar(x=experts, y=first, name="first step (both runs)", marker_color="#bbbbbb")
    )
    for coef, name in runs:
        fig.add_bar(x=experts, y=bal.tokens_per_expert[coef][-1], name=f"{name}, step {steps}")
    fig.add_hline(y=sum(first) / len(first), line_dash="dot", annotation_text="even load")
    fig.update_layout(
        title="assignments per expert (4 ranks x 64 tokens x top-2)",
        barmode="group",
        height=360,
        width=800,
        yaxis_title="assignments",
    )
    return fig


def capacity_rows(bal: Any, row_bytes: int) -> list[dict]:
    """The capacity sweep's rows with the padded buffer in KB (rows x ``row_bytes``)."""
    return [
        {**row, "padded buffer (KB)": row["padded buffer rows"] * row_bytes / 1e3}
        for row in bal.capacity
    ]


def capacity_figure(
    bal: Any, runs: Sequence[tuple[float, str]], factors: Sequence[float], row_bytes: int
) -> go.Figure:
    """Dropped assignments (%) of each run, and the padded buffer per rank (KB, right axis),
    against the capacity factor."""
    fig = go.Figure()
    for coef, name in runs:
        pts = [row for row in bal.capacity if row["aux coef"] == coef]
        fig.add_scatter(
            x=list(factors),
            y=[p["dropped %"] for p in pts],
            name=f"dropped %, {name}",
            mode="lines+markers",
        )
    fig.add_scatter(
        x=list(factors),
        y=[p["padded buffer rows"] * row_bytes / 1e3 for p in pts],
        name="padded buffer (KB)",
        yaxis="y2",
        mode="lines+markers",
        line_dash="dash",
    )
    fig.update_layout(
        title="capacity factor: fewer drops, linearly more buffer",
        height=360,
        width=800,
        xaxis_title="capacity factor",
        yaxis_title="% of assignments dropped",
        yaxis2=dict(title="KB per rank", overlaying="y", side="right"),
    )
    return fig


STATE_COLS = ("experts' state (GB)", "dense state (GB)", "total (GB)")


def state_rows(cfg: Any, layouts: Sequence[tuple[str, dict]]) -> list[dict]:
    """Per (label, layout keywords): parameters and model state per GPU, experts and dense
    part apart (``calc.moe_memory_per_rank``, 16 B/param)."""
    rows = []
    for label, kw in layouts:
        m = moe_memory_per_rank(cfg, **kw)
        rows.append(
            {
                "layout": label,
                "expert params / GPU (B)": m.expert_params / 1e9,
                "dense params / GPU (B)": m.dense_params / 1e9,
                STATE_COLS[0]: m.expert_bytes / GB,
                STATE_COLS[1]: m.dense_bytes / GB,
                STATE_COLS[2]: m.total / GB,
            }
        )
    return rows


def ep_memory_figure(cfg: Any, eps: Sequence[int], gpu_gb: float = 80) -> go.Figure:
    """Model state per GPU against the EP degree on 2048 GPUs (PP16, ZeRO-1, dp = 128 / ep):
    routed experts and the dense part stacked, log axis, the GPU's memory marked."""
    mems = [moe_memory_per_rank(cfg, ep=ep, dp=128 // ep, pp=16, zero_stage=1) for ep in eps]
    x = [str(ep) for ep in eps]
    fig = go.Figure(
        [
            go.Bar(x=x, y=[m.expert_bytes / GB for m in mems], name="routed experts"),
            go.Bar(x=x, y=[m.dense_bytes / GB for m in mems], name="dense part (ZeRO-1 over 128)"),
        ]
    )
    # on a log axis an annotation's y is in log10 units: add_hline's own label would sit at 10^80
    fig.add_hline(y=gpu_gb, line_dash="dot")
    fig.add_annotation(
        text=f"{gpu_gb:g} GB",
        x=1,
        xref="paper",
        y=math.log10(gpu_gb),
        yref="y",
        showarrow=False,
        xanchor="right",
        yanchor="bottom",
    )
    fig.update_layout(
        title="DeepSeek-V3 on 2048 GPUs, PP16, ZeRO-1: model state per GPU vs EP degree"
        " (dp = 128 / ep)",
        barmode="stack",
        height=360,
        width=800,
        xaxis_title="ep",
        yaxis=dict(title="GB per GPU", type="log"),
    )
    return fig


PLAN_FMT = {
    "GB / GPU": "{:.1f}",
    "compute (s)": "{:.1f}",
    "all-to-all (s)": "{:.1f}",
    "DP sync (s)": "{:.2f}",
    "bubble": "{:.1%}",
    "step, no overlap (s)": "{:.1f}",
}


def rank_of_published(plans: Sequence[Any]) -> int:
    """Where DeepSeek-V3's published layout (PP16, DP128, EP64) falls in a ranked plan list."""
    return next(i for i, p in enumerate(plans) if p.layout == (16, 128, 64))


def plan_row(rank: int, p: Any) -> dict:
    """One MoE plan (``calc.plan_moe``) as a table row, with its place ``rank`` (0-based)."""
    return {
        "rank": rank + 1,
        "PP x DP": f"{p.pp} x {p.dp}",
        "EP x replicas": f"{p.ep} x {p.expert_replicas}",
        "GB / GPU": p.memory_bytes / GB,
        "compute (s)": p.compute_s,
        "all-to-all (s)": p.a2a_s,
        "DP sync (s)": p.dp_comm_s,
        "bubble": p.bubble,
        "step, no overlap (s)": p.step_s,
    }


def traffic_rows(a2a: Any, m: Any, layers_per_stage: float) -> list[dict]:
    """DeepSeek-V3-like traffic per GPU (uniform routing): the EP all-to-all of one MoE layer
    (``calc.all_to_all_bytes_per_layer``) and of a stage's layers, against the ZeRO-1 syncs of
    the experts (over dp = 2) and of the dense part (over 128), in bf16."""
    stage = f"EP all-to-all, the stage's {layers_per_stage:.1f} MoE layers"
    items = (
        ("EP all-to-all, one MoE layer, fwd + bwd", "every layer, every micro-batch", a2a.step),
        (stage, "every micro-batch", layers_per_stage * a2a.step),
        (
            "ZeRO-1 sync of its experts over dp = 2 (bf16)",
            "once per step",
            dp_bytes_per_rank(2 * m.expert_params, 2, "zero1"),
        ),
        (
            "ZeRO-1 sync of its dense part over 128 (bf16)",
            "once per step",
            dp_bytes_per_rank(2 * m.dense_params, 128, "zero1"),
        ),
    )
    return [{"traffic, per GPU": w, "when": t, "GB": b / GB} for w, t, b in items]
