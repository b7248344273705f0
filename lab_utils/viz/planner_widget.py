"""3D planner widget: rank DP x TP x PP layouts for a model on a cluster (labs 08, 12).

A thin view over ``calc.plan`` / ``calc.best_per_layout``: every number in the table and the
chart is a field of a ``calc.Plan`` (memory per GPU of the fullest stage, step-time parts,
bubble, MFU, problems). The planner's model is first-order; see ``calc.planner``.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lab_utils.calc import (
    DEVICES,
    GB,
    LINKS,
    PRESETS,
    Cluster,
    ModelConfig,
    Plan,
    best_per_layout,
    plan,
)
from lab_utils.calc._check import boolean, choice, number, pos_int
from lab_utils.viz._base import Explorer, Spec
from lab_utils.viz.controls import checkbox, dropdown, float_text, int_text
from lab_utils.viz.style import FIGURE_WIDTH, LEGEND_BESIDE

MAX_WORLD = 65_536
N_CONTRAST = 3  # infeasible layouts listed after the feasible ones, to show why they fail


@dataclass(frozen=True)
class PlannerState:
    model: str
    cfg: ModelConfig
    cluster: Cluster
    global_batch: int
    seq_len: int
    top_k: int
    per_layout: bool
    efficiency: float


def validate(values: dict[str, Any]) -> PlannerState:
    choice("model", values["model"], list(PRESETS))
    for label, key in (
        ("GPUs per node", "gpus_per_node"),
        ("nodes", "n_nodes"),
        ("global batch (sequences)", "global_batch"),
        ("seq len", "seq_len"),
        ("rows shown", "top_k"),
    ):
        pos_int(label, values[key])
    world = values["gpus_per_node"] * values["n_nodes"]
    if world > MAX_WORLD:
        raise ValueError(f"{world} GPUs is more than this planner enumerates ({MAX_WORLD})")
    for label, key, hi in (
        ("GPU memory (GB)", "gpu_mem_gb", 1e5),
        ("compute efficiency", "efficiency", 1),
    ):
        number(label, values[key], 0, hi, lo_open=True, expected=f"a number in (0, {hi:g}]")
    choice("device", values["device"], list(DEVICES))
    choice("intra_link", values["intra_link"], list(LINKS))
    choice("inter_link", values["inter_link"], list(LINKS))
    boolean("per_layout", values["per_layout"])
    dev = DEVICES[values["device"]]
    cluster = Cluster(
        values["gpus_per_node"],
        values["n_nodes"],
        values["gpu_mem_gb"] * GB,
        LINKS[values["intra_link"]].bytes_per_s,
        LINKS[values["inter_link"]].bytes_per_s,
        dev.peak_flops,
        name=f"{values['n_nodes']} x {values['gpus_per_node']} {dev.name}",
    )
    return PlannerState(
        values["model"],
        PRESETS[values["model"]],
        cluster,
        values["global_batch"],
        values["seq_len"],
        values["top_k"],
        bool(values["per_layout"]),
        float(values["efficiency"]),
    )


@lru_cache(maxsize=16)  # calc.plan is pure; table-only controls then cost nothing
def _plans(
    cfg: ModelConfig, cluster: Cluster, global_batch: int, seq_len: int, efficiency: float
) -> tuple[Plan, ...]:
    return tuple(plan(cfg, cluster, global_batch, seq_len, compute_efficiency=efficiency))


@lru_cache(maxsize=16)  # the figure and the table share one selection per state
def candidates(st: PlannerState) -> list[Plan]:
    """The rows shown: the best ``top_k`` feasible plans (one per layout if asked), then up to
    three infeasible layouts (least memory first) with their reasons."""
    plans = list(_plans(st.cfg, st.cluster, st.global_batch, st.seq_len, st.efficiency))
    good = best_per_layout(plans) if st.per_layout else [p for p in plans if p.feasible]
    # Contrast rows: least memory first, one per layout and per KIND of problem (digits
    # stripped), so "TP spans nodes" does not crowd out "needs 95 GB > 80 GB".
    bad: list[Plan] = []
    seen: set[object] = set()
    for p in plans:
        if len(bad) == N_CONTRAST:
            break
        if p.feasible or p.layout in seen:
            continue
        seen.add(p.layout)
        kind = re.sub(r"[\d.]+", "#", p.problems[0])
        if kind not in seen:
            seen.add(kind)
            bad.append(p)
    return good[: st.top_k] + bad


def _label(i: int, p: Plan) -> str:
    return f"{i}: d{p.dp} t{p.tp} p{p.pp} Z{p.zero_stage}" + ("" if p.feasible else " ✗")


def figure_spec(st: PlannerState) -> Spec:
    """Left: memory per GPU (model state + activations/other) vs capacity. Right: step time
    split into compute, TP, PP, bubble and DP sync. Infeasible rows are faded."""
    rows = candidates(st)
    xs = [_label(i + 1, p) for i, p in enumerate(rows)]
    fade = [1.0 if p.feasible else 0.35 for p in rows]
    data: list[dict[str, Any]] = []

    def bar(name: str, ys: list[float], color: str, axis: str, unit: str) -> None:
        data.append(
            dict(
                type="bar",
                name=name,
                x=xs,
                y=ys,
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
                marker=dict(color=color, opacity=fade),
                hovertemplate=f"%{{x}}<br>{name}: %{{y:.3g}} {unit}<extra></extra>",
            )
        )

    bar("model state", [p.model_state.total / GB for p in rows], "#4C78A8", "", "GB")
    bar(
        "activations + buffers",
        [(p.memory_bytes - p.model_state.total) / GB for p in rows],
        "#54A24B",
        "",
        "GB",
    )
    data.append(
        dict(
            type="scatter",
            mode="lines",
            name="GPU memory",
            x=xs,
            y=[st.cluster.gpu_mem_bytes / GB] * len(xs),
            xaxis="x",
            yaxis="y",
            line=dict(color="black", dash="dash"),
            hovertemplate="GPU memory %{y:.0f} GB<extra></extra>",
        )
    )
    busy = [p.compute_s + p.tp_comm_s + p.pp_comm_s for p in rows]
    bar("compute", [p.compute_s for p in rows], "#72B7B2", "2", "s")
    bar("TP comm", [p.tp_comm_s for p in rows], "#B279A2", "2", "s")
    bar("PP comm", [p.pp_comm_s for p in rows], "#9D755D", "2", "s")
    bar("bubble", [b * p.bubble for b, p in zip(busy, rows)], "#BAB0AC", "2", "s")
    bar("DP sync", [p.dp_comm_s for p in rows], "#E45756", "2", "s")
    layout = dict(
        barmode="stack",
        width=FIGURE_WIDTH,
        height=420,
        # fixed margins that fit the labels (automargin pushed the left one to 63 px at most):
        # plotly's automargin measures every tick label on each redraw, 10 ms of a 24 ms
        # Plotly.react in the page and up to 35 ms at the tail (issue 37's latency breakdown)
        margin=dict(l=70, r=20, t=60, b=110),
        title=dict(
            text=f"{st.cfg.name} on {st.cluster.world} GPUs ({st.cluster.name}), "
            f"batch {st.global_batch} x {st.seq_len} tokens"
        ),
        xaxis=dict(domain=[0, 0.46], anchor="y", tickangle=-40, automargin=False),
        yaxis=dict(anchor="x", title=dict(text="memory per GPU (GB = 10^9 B)"), automargin=False),
        xaxis2=dict(domain=[0.56, 1.0], anchor="y2", tickangle=-40, automargin=False),
        yaxis2=dict(anchor="x2", title=dict(text="time per step (s)"), automargin=False),
        legend=dict(LEGEND_BESIDE, font=dict(size=10)),
    )
    return {"data": data, "layout": layout}


_TH = "padding:2px 8px;border-bottom:1px solid #999;text-align:right"
_TD = "padding:2px 8px;text-align:right"


def summary_html(st: PlannerState) -> str:
    """One line of verdict and the ranked table (HTML)."""
    rows = candidates(st)
    n_ok = sum(p.feasible for p in rows)
    head = (
        "#",
        "dp",
        "tp",
        "pp",
        "ZeRO",
        "micro-batch",
        "m",
        "recompute",
        "memory/GPU (GB)",
        "step (s)",
        "comm (s)",
        "bubble",
        "MFU",
        "feasible / reason",
    )
    lines = ["<tr>" + "".join(f"<th style='{_TH}'>{h}</th>" for h in head) + "</tr>"]
    for i, p in enumerate(rows, 1):
        why = (
            "OK" + ("; " + "; ".join(p.warnings) if p.warnings else "")
            if p.feasible
            else "; ".join(p.problems)
        )
        cells = (
            i,
            p.dp,
            p.tp,
            p.pp,
            p.zero_stage,
            p.micro_batch,
            p.n_micro,
            p.recompute,
            f"{p.memory_bytes / GB:.1f}",
            f"{p.step_s:.2f}",
            f"{p.tp_comm_s + p.pp_comm_s + p.dp_comm_s:.2f}",
            f"{p.bubble:.1%}",
            f"{p.mfu:.0%}",
        )
        color = "" if p.feasible else "color:#8a1c1c;"
        lines.append(
            f"<tr style='{color}'>"
            + "".join(f"<td style='{_TD}'>{c}</td>" for c in cells)
            + f"<td style='padding:2px 8px;text-align:left;max-width:420px'>"
            f"{html.escape(why)}</td></tr>"
        )
    verdict = (
        f"<b>{n_ok}</b> feasible layout(s) shown, fastest first; the last "
        f"{len(rows) - n_ok} rows do not fit and say why."
        if n_ok
        else "<b>No layout fits</b>: add GPUs, GPU memory, or shrink the batch/sequence."
    )
    return (
        f"{verdict} GB = 10^9 bytes; memory is the fullest pipeline stage.<br>"
        f"<table style='border-collapse:collapse;font-size:12px'>{''.join(lines)}</table>"
    )


class PlannerWidget(Explorer):
    """Ranked 3D-parallel layouts. ``set(model="llama2-70b", n_nodes=32, global_batch=512)``."""

    TITLE = "3D parallelism planner"
    CSS = "planner-widget"
    validate = staticmethod(validate)
    figure_spec = staticmethod(figure_spec)
    summary_html = staticmethod(summary_html)

    def __init__(self, **initial: Any) -> None:
        dev = "A100-SXM4-80GB"
        controls = {
            "model": dropdown("model", list(PRESETS), "llama2-70b"),
            "device": dropdown("GPU", list(DEVICES), dev),
            "gpu_mem_gb": float_text("GPU memory (GB)", DEVICES[dev].memory_bytes / GB),
            "gpus_per_node": int_text("GPUs per node", 8),
            "n_nodes": int_text("nodes", 32),
            "intra_link": dropdown("intra-node link", list(LINKS), "NVLink3"),
            "inter_link": dropdown("inter-node link", list(LINKS), "IB-HDR"),
            "global_batch": int_text("global batch (sequences)", 512),
            "seq_len": int_text("seq len (tokens)", 4096),
            "efficiency": float_text("compute efficiency", 0.5),
            "top_k": int_text("rows shown", 8),
            "per_layout": checkbox("best plan per (dp, tp, pp) only", True),
        }
        super().__init__(controls, **initial)

    def on_control_change(self, change: dict[str, Any]) -> None:
        # Picking a GPU fills in its memory (still editable afterwards).
        if change["owner"] is self.controls["device"] and change["new"] in DEVICES:
            held, self._holding = self._holding, True
            try:
                self.controls["gpu_mem_gb"].value = DEVICES[change["new"]].memory_bytes / GB
            finally:
                self._holding = held


def planner_widget(**initial: Any) -> PlannerWidget:
    """A ready-to-display 3D planner (labs 08, 12)."""
    return PlannerWidget(**initial)
