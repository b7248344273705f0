"""Pictures of where tensor parallelism communicates and how a 3D mesh places ranks (labs 06, 08).

    megatron_block_figure()     the Megatron transformer block: attention and MLP, the f and g
                                operators, the replicated / tensor-parallel / sequence-parallel
                                regions, with and without sequence parallelism       (lab 06)
    mesh_figure(topo, gpus_per_node)   ranks on a grid: which axis is which group, where the
                                nodes are                                             (lab 08)

Static plotly figures (shapes and text), drawn from the same facts the code implements:
lab_utils.parallel.tensor_parallel.comm (f, g and their sequence-parallel versions) and
lab_utils.topology (rank = (pp * dp_size + dp) * tp_size + tp).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from lab_utils.viz.style import FIGURE_WIDTH

REPLICATED, SHARDED, SEQUENCE, OPERATOR = "#eeeeee", "#dbe9f6", "#d9f0d3", "#fdd0a2"

# (label, kind): kind "rep" = replicated region, "tp" = inside the TP region, "op" = f or g
_ATTENTION = (
    ("LayerNorm", "rep"),
    ("f", "op"),
    ("q, k, v<br>column-par.", "tp"),
    ("attention<br>n/t heads", "tp"),
    ("proj<br>row-par.", "tp"),
    ("g", "op"),
    ("dropout<br>+ residual", "rep"),
)
_MLP = (
    ("LayerNorm", "rep"),
    ("f", "op"),
    ("fc<br>column-par.", "tp"),
    ("GELU", "tp"),
    ("proj<br>row-par.", "tp"),
    ("g", "op"),
    ("dropout<br>+ residual", "rep"),
)
_OPS = {  # operator -> (name, forward, backward), without and with sequence parallelism
    (False, "f"): ("f", "identity", "all-reduce"),
    (False, "g"): ("g", "all-reduce", "identity"),
    (True, "f"): ("all-gather", "all-gather", "reduce-scatter<br>+ re-gather"),
    (True, "g"): ("reduce-scatter", "reduce-scatter", "all-gather"),
}


def draw_box(
    fig: go.Figure,
    x0: float,
    x1: float,
    y0: float,
    y1: float,
    color: str,
    text: str,
    circle: bool = False,
    size: int = 11,
) -> None:
    fig.add_shape(
        type="circle" if circle else "rect",
        x0=x0,
        x1=x1,
        y0=y0,
        y1=y1,
        fillcolor=color,
        line=dict(color="#555555", width=1),
    )
    fig.add_annotation(
        x=(x0 + x1) / 2, y=(y0 + y1) / 2, text=text, showarrow=False, font=dict(size=size)
    )


def _sub_block(fig: go.Figure, items: tuple, y: float, sp: bool) -> None:
    """One row: a sub-block (attention or MLP) from input to residual add."""
    x, gap = 1.0, 1.8
    widths = {"rep": 13.0, "tp": 14.0, "op": 8.0}
    tp_start = tp_end = None
    for label, kind in items:
        w = widths[kind]
        if kind == "op":
            name, fwd, bwd = _OPS[sp, label]
            draw_box(
                fig,
                x,
                x + w,
                y - 3.2,
                y + 3.2,
                OPERATOR,
                f"<b>{label if not sp else label + '̄'}</b>",
                circle=True,
                size=12,
            )
            fig.add_annotation(
                x=x + w / 2,
                y=y - 6.6,
                showarrow=False,
                font=dict(size=9),
                text=f"fwd: {fwd}<br>bwd: {bwd}",
            )
            if label == "f":
                tp_start = x + w + gap / 2
            else:
                tp_end = x - gap / 2
        else:
            color = (SEQUENCE if sp else REPLICATED) if kind == "rep" else SHARDED
            draw_box(fig, x, x + w, y - 3.5, y + 3.5, color, label)
        if (label, kind) != items[-1]:
            fig.add_annotation(
                x=x + w + gap,
                y=y,
                ax=x + w,
                ay=y,
                xref="x",
                yref="y",
                axref="x",
                ayref="y",
                showarrow=True,
                arrowhead=2,
                arrowsize=0.8,
                text="",
            )
        x += w + gap
    fig.add_shape(
        type="rect",
        x0=tp_start,
        x1=tp_end,
        y0=y - 4.6,
        y1=y + 4.6,
        line=dict(color="#1f77b4", width=1.5, dash="dot"),
        fillcolor="rgba(0,0,0,0)",
    )


def megatron_block_figure(width: int = FIGURE_WIDTH) -> go.Figure:
    """Two panels: Megatron TP (top) and TP + sequence parallelism (bottom); in each, the
    attention sub-block above the MLP sub-block. Blue: each rank holds its own piece (heads,
    hidden columns); grey: every rank holds the SAME full (B, T, C) tensor; green: each rank
    holds its T/t slice of the sequence. f / g: Megatron's conjugate operators (comm.py)."""
    fig = go.Figure()
    panels = (
        (
            False,
            92,
            "Megatron TP (Shoeybi et al. 2019): 2 all-reduces forward, 2 backward per layer",
        ),
        (
            True,
            44,
            "TP + sequence parallelism (Korthikanti et al. 2022): all-gather and "
            "reduce-scatter instead",
        ),
    )
    for sp, top, title in panels:
        fig.add_annotation(
            x=1,
            y=top + 3,
            text=f"<b>{title}</b>",
            showarrow=False,
            xanchor="left",
            font=dict(size=12),
        )
        _sub_block(fig, _ATTENTION, top - 8, sp)
        _sub_block(fig, _MLP, top - 27, sp)
    legend = (
        (REPLICATED, "replicated: same (B, T, C) on every TP rank"),
        (SHARDED, "tensor-parallel: each rank its heads / columns"),
        (SEQUENCE, "sequence-parallel: each rank its (B, T/t, C) slice"),
    )
    for i, (color, text) in enumerate(legend):
        x0 = 2 + i * 34
        fig.add_shape(
            type="rect",
            x0=x0,
            x1=x0 + 3,
            y0=-4,
            y1=-1,
            fillcolor=color,
            line=dict(color="#555555", width=1),
        )
        fig.add_annotation(
            x=x0 + 3.8, y=-2.5, text=text, showarrow=False, xanchor="left", font=dict(size=10)
        )
    fig.update_xaxes(visible=False, range=[0, 104])
    fig.update_yaxes(visible=False, range=[-6, 98])
    fig.update_layout(
        width=width,
        height=560,
        margin=dict(l=10, r=10, t=10, b=10),
        plot_bgcolor="white",
        showlegend=False,
    )
    return fig


def mesh_figure(
    topo: Any, gpus_per_node: int | None = None, width: int = FIGURE_WIDTH
) -> go.Figure:
    """Every rank of a dp x tp x pp Topology on a grid: one column per pipeline stage (pp), in a
    column one block per data-parallel replica (dp), in a block the tp ranks one under the other.
    Blue boxes: tp groups (consecutive ranks); green dashed brackets: dp groups (same pp and tp);
    red arrows: pp neighbours (same dp and tp). Shading: nodes of ``gpus_per_node`` consecutive
    ranks, as a launcher numbers them."""
    fig = go.Figure()
    cell_w, cell_h, dp_gap, col_gap = 18.0, 7.0, 5.0, 16.0
    block_h = topo.tp * cell_h + dp_gap

    def box_of(rank: int) -> tuple[float, float, float, float]:
        c = topo.coords(rank)
        x0 = c["pp"] * (cell_w + col_gap)
        y1 = -(c["dp"] * block_h + c["tp"] * cell_h)
        return x0, x0 + cell_w, y1 - cell_h, y1

    node_colors = ("rgba(255,187,120,0.30)", "rgba(174,199,232,0.40)")
    for r in range(topo.world_size):
        x0, x1, y0, y1 = box_of(r)
        if gpus_per_node:
            fig.add_shape(
                type="rect",
                x0=x0 - 1.5,
                x1=x1 + 1.5,
                y0=y0 - 0.6,
                y1=y1 + 0.6,
                line_width=0,
                fillcolor=node_colors[(r // gpus_per_node) % 2],
                layer="below",
            )
        c = topo.coords(r)
        draw_box(
            fig,
            x0 + 0.5,
            x1 - 0.5,
            y0 + 0.5,
            y1 - 0.5,
            "white",
            f"<b>rank {r}</b>  pp{c['pp']} dp{c['dp']} tp{c['tp']}",
            size=10,
        )
    for group in topo.all_groups("tp"):
        x0, x1, _, y1 = box_of(group[0])
        _, _, y0, _ = box_of(group[-1])
        fig.add_shape(
            type="rect", x0=x0, x1=x1, y0=y0, y1=y1, line=dict(color="#1f77b4", width=2.5)
        )
    for group in topo.all_groups("dp"):
        if len(group) < 2:
            continue
        tp_index = topo.coords(group[0])["tp"]
        x = box_of(group[0])[0] - 2.2 - 2.2 * tp_index
        ys = [(box_of(r)[2] + box_of(r)[3]) / 2 for r in group]
        fig.add_shape(
            type="line",
            x0=x,
            x1=x,
            y0=min(ys),
            y1=max(ys),
            line=dict(color="#2ca02c", width=2, dash="dash"),
        )
        for y in ys:
            fig.add_shape(
                type="line",
                x0=x,
                x1=box_of(group[0])[0] + 0.5,
                y0=y,
                y1=y,
                line=dict(color="#2ca02c", width=1.5),
            )
    for group in topo.all_groups("pp"):
        for a, b in zip(group, group[1:]):
            xa, ya = box_of(a)[1], (box_of(a)[2] + box_of(a)[3]) / 2
            xb = box_of(b)[0] - 2.2 * topo.tp - 0.5 if topo.dp > 1 else box_of(b)[0]
            fig.add_annotation(
                x=xb,
                y=ya,
                ax=xa,
                ay=ya,
                xref="x",
                yref="y",
                axref="x",
                ayref="y",
                showarrow=True,
                arrowhead=2,
                arrowcolor="#d62728",
                arrowwidth=1.5,
                text="",
            )
    for s in range(topo.pp):
        fig.add_annotation(
            x=s * (cell_w + col_gap) + cell_w / 2,
            y=3,
            showarrow=False,
            text=f"<b>stage pp={s}</b>",
            font=dict(size=11),
        )
    for d in range(topo.dp):
        fig.add_annotation(
            x=-2.5 - 2.2 * topo.tp,
            y=-(d * block_h + topo.tp * cell_h / 2),
            xanchor="right",
            text=f"replica<br>dp={d}",
            showarrow=False,
            font=dict(size=10),
        )
    total_w = topo.pp * (cell_w + col_gap) - col_gap
    total_h = topo.dp * block_h
    key = (
        "<span style='color:#1f77b4'><b>box</b>: tp group</span>   "
        "<span style='color:#2ca02c'><b>dashed</b>: dp group</span>   "
        "<span style='color:#d62728'><b>arrow</b>: pp neighbours</span>"
    )
    if gpus_per_node:
        key += f"   <b>shading</b>: nodes of {gpus_per_node} GPUs"
    fig.add_annotation(
        x=-12, y=-total_h - 1, text=key, showarrow=False, xanchor="left", font=dict(size=10)
    )
    fig.update_xaxes(visible=False, range=[-13 - 2.2 * topo.tp, total_w + 2])
    fig.update_yaxes(visible=False, range=[-total_h - 4, 6])
    fig.update_layout(
        width=min(width, max(560, 200 + 230 * topo.pp)),
        height=110 + 26 * topo.dp * topo.tp + 18 * topo.dp,
        margin=dict(l=10, r=10, t=40, b=10),
        plot_bgcolor="white",
        showlegend=False,
        title=dict(
            text=f"dp x tp x pp = {topo.dp} x {topo.tp} x {topo.pp}: "
            "rank = (pp * dp_size + dp) * tp_size + tp",
            font_size=12,
        ),
    )
    return fig
