"""Pictures of mechanisms that words describe badly (issue 36, T6), drawn from the code's facts.

    zero_partition_figure(n_params, recipe, dp)   what each ZeRO stage shards over K ranks:
                        weights, gradients, optimizer state; bytes from calc.model_state_memory
                        (ZeRO paper Fig. 1, our drawing)                                (lab 05)
    fsdp_lifecycle_figure(units)   per FSDP unit: all-gather, compute, free, reduce-scatter, in
                        forward and backward order, and how many full units are held  (lab 05)
    moe_dispatch_figure(routing, gates, n_experts)   an expert-parallel MoE layer on a tiny
                        routing: sort by expert, split sizes, all-to-all, experts, all-to-all,
                        unsort x gate (parallel.expert_parallel.dispatch_and_combine)  (lab 09)
    mesh_hierarchy_figure(sizes, order, gpus_per_node)   which mesh axis lands on which link:
                        ranks numbered innermost axis fastest, nodes of consecutive ranks (lab 08)

Static plotly figures (shapes and text); bad input raises ValueError naming the argument.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import plotly.graph_objects as go

from lab_utils.calc import GB, model_state_memory
from lab_utils.calc._check import boolean, number, pos_int, pos_num, sequence, text, whole
from lab_utils.viz.gantt import KIND_COLORS
from lab_utils.viz.parallel_diagrams import draw_box
from lab_utils.viz.style import FIGURE_WIDTH

BUCKETS = (("weights", "#4C78A8"), ("gradients", "#F58518"), ("optimizer state", "#54A24B"))
EXPERT_COLORS = (
    "#4C78A8",
    "#F58518",
    "#54A24B",
    "#E45756",
    "#72B7B2",
    "#B279A2",
    "#FF9DA6",
    "#9D755D",
)
_STAGE_NAMES = ("DDP", "ZeRO-1 (P_os)", "ZeRO-2 (P_os+g)", "ZeRO-3 / FSDP (P_os+g+p)")


class _Canvas:
    """Collects shapes, notes and line segments, then builds the figure once: plotly's
    ``add_shape`` re-validates every earlier shape, so 100 of them take seconds. Segments of the
    same name and style become one trace (separated by None)."""

    def __init__(self) -> None:
        self.shapes: list[dict] = []
        self.notes: list[dict] = []
        self.lines: dict[tuple, tuple[list, list]] = {}

    def add_shape(self, **kw: Any) -> None:
        self.shapes.append(kw)

    def add_annotation(self, **kw: Any) -> None:
        self.notes.append(kw)

    def add_segment(
        self, x: Sequence[float], y: Sequence[float], name: str, color: str, dash: str = "solid"
    ) -> None:
        xs, ys = self.lines.setdefault((name, color, dash), ([], []))
        xs += [*x, None]
        ys += [*y, None]

    def figure(
        self, xr: tuple[float, float], yr: tuple[float, float], width: int, height: int, title: str
    ) -> go.Figure:
        data = [
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name=name,
                hoverinfo="skip",
                line=dict(color=color, width=1.2, dash=dash),
            )
            for (name, color, dash), (xs, ys) in self.lines.items()
        ]
        return go.Figure(
            data=data,
            layout=dict(
                shapes=self.shapes,
                annotations=self.notes,
                width=width,
                height=height,
                xaxis=dict(visible=False, range=list(xr)),
                yaxis=dict(visible=False, range=list(yr)),
                margin=dict(l=10, r=10, t=50, b=10),
                plot_bgcolor="white",
                showlegend=False,
                title=dict(text=title, font_size=13, x=0.01),
            ),
        )


def _legend(
    fig: _Canvas, items: Sequence[tuple[str, str]], y: float, x0: float, step: float
) -> None:
    """Coloured squares with labels in one row at height y (data units), below the drawing."""
    for i, (label, color) in enumerate(items):
        x = x0 + i * step
        fig.add_shape(
            type="rect",
            x0=x,
            x1=x + 1.6,
            y0=y - 0.8,
            y1=y + 0.8,
            fillcolor=color,
            line=dict(color="#555555", width=1),
        )
        fig.add_annotation(
            x=x + 2.2, y=y, text=label, showarrow=False, xanchor="left", font=dict(size=10)
        )


def zero_partition_figure(
    n_params: float = 7.5e9, recipe_name: str = "mixed_adam", dp: int = 4, width: int = FIGURE_WIDTH
) -> go.Figure:
    """One row per stage (DDP, ZeRO-1, 2, 3), one column per rank (ranks 0, 1, ..., K-1 when
    K > 4). Each bucket is a bar as long as its bytes per parameter; the coloured part is what
    the rank holds (all of it, or its 1/K shard at offset r/K; a shard under 2% of the width
    is drawn 2% wide). Right: the per-rank bytes of calc.model_state_memory."""
    n_params = pos_num("n_params", n_params)
    dp = whole("dp", dp, lo=2, hint="ZeRO shards over at least 2 ranks")
    full = [model_state_memory(n_params, recipe_name, s, 1) for s in range(4)]
    mems = [model_state_memory(n_params, recipe_name, s, dp) for s in range(4)]
    ranks = list(range(dp)) if dp <= 4 else [0, 1, None, dp - 1]
    col_w, bar_w, row_h = 21.0, 18.0, 10.0
    per_param = [
        b / n_params for b in (full[0].params, full[0].grads, full[0].master + full[0].optimizer)
    ]
    scale = bar_w / max(per_param)
    fig = _Canvas()
    for s, (m1, mk) in enumerate(zip(full, mems)):
        y = -s * row_h
        fig.add_annotation(
            x=0,
            y=y - 3,
            text=f"<b>{_STAGE_NAMES[s]}</b>".replace(" (", "<br>("),
            showarrow=False,
            xanchor="left",
            align="left",
            font=dict(size=11),
        )
        held = (mk.params, mk.grads, mk.master + mk.optimizer)
        whole_b = (m1.params, m1.grads, m1.master + m1.optimizer)
        coef = {"rep": 0.0, "shard": 0.0}
        for c, r in enumerate(ranks):
            x0 = 22 + c * col_w
            if r is None:
                fig.add_annotation(
                    x=x0 + bar_w / 2, y=y - 3, text="…", showarrow=False, font=dict(size=16)
                )
                continue
            for b, ((name, color), h, w, pp) in enumerate(zip(BUCKETS, held, whole_b, per_param)):
                yb, length = y - b * 2.4, pp * scale
                sharded = w > 0 and h < w * (1 - 1e-9)
                if c == 0:
                    coef["shard" if sharded else "rep"] += pp
                fig.add_shape(
                    type="rect",
                    x0=x0,
                    x1=x0 + length,
                    y0=yb - 1.8,
                    y1=yb,
                    fillcolor="white",
                    line=dict(color="#999999", width=1),
                )
                piece = max(length / dp, 0.02 * bar_w) if sharded else length
                lo = min(x0 + length * r / dp, x0 + length - piece) if sharded else x0
                fig.add_shape(
                    type="rect",
                    x0=lo,
                    x1=lo + piece,
                    y0=yb - 1.8,
                    y1=yb,
                    fillcolor=color,
                    line=dict(color="#555555", width=1),
                )
        formula = " + ".join(
            t
            for t in (
                f"{coef['rep']:g}Ψ" if coef["rep"] else "",
                f"{coef['shard']:g}Ψ/K" if coef["shard"] else "",
            )
            if t
        )
        fig.add_annotation(
            x=24 + len(ranks) * col_w,
            y=y - 3,
            showarrow=False,
            xanchor="left",
            text=f"{formula}<br><b>{mk.total / GB:.1f} GB</b> per rank",
            font=dict(size=11),
        )
    for c, r in enumerate(ranks):
        if r is not None:
            fig.add_annotation(
                x=22 + c * col_w + bar_w / 2,
                y=3,
                text=f"<b>rank {r}</b>",
                showarrow=False,
                font=dict(size=11),
            )
    _legend(
        fig,
        [(f"{n} ({pp:g} B/param)", c) for (n, c), pp in zip(BUCKETS, per_param)]
        + [("not held by this rank", "white")],
        y=-4 * row_h + 1,
        x0=1,
        step=24,
    )
    right = 40 + len(ranks) * col_w
    if min(per_param[i] * scale / dp for i in range(3) if per_param[i]) < 0.02 * bar_w:
        fig.add_annotation(
            x=right,
            y=-4 * row_h + 1,
            xanchor="right",
            showarrow=False,
            text="(shards under 2% of a column drawn 2% wide)",
            font=dict(size=9),
        )
    name = getattr(recipe_name, "name", recipe_name)
    return fig.figure(
        (-1, right),
        (-4 * row_h - 1, 5),
        width,
        470,
        f"What each rank holds: Ψ = {n_params / 1e9:g}B parameters, {name}, "
        f"K = {dp} ranks (bytes: calc.model_state_memory)",
    )


def fsdp_lifecycle_events(
    units: Sequence[str], reshard_after_forward: bool = True
) -> list[tuple[str, str]]:
    """(unit, action) in execution order, one unit at a time (no prefetch), as the hooks of
    parallel.fsdp run for the blocks. Forward: all-gather, forward, free. Backward, units in
    reverse: all-gather again, backward, reduce-scatter, free. ``reshard_after_forward=False``
    keeps each unit's full weights from its forward to its backward (no second all-gather).
    (The root unit, which wraps the whole model, is not freed after forward: not drawn.)"""
    units = sequence("units", units, text, min_len=1)
    if len(set(units)) < len(units):
        raise ValueError(f"units must be distinct names, got {units}")
    reshard = boolean("reshard_after_forward", reshard_after_forward)
    events: list[tuple[str, str]] = []
    for u in units:
        events += [(u, "all-gather"), (u, "forward")] + ([(u, "free")] if reshard else [])
    for u in reversed(units):
        events += ([(u, "all-gather")] if reshard else []) + [
            (u, "backward"),
            (u, "reduce-scatter"),
            (u, "free"),
        ]
    return events


_ACTIONS = {
    "all-gather": ("AG", KIND_COLORS["comm"]),
    "forward": ("F", KIND_COLORS["forward"]),
    "free": ("free", KIND_COLORS["idle"]),
    "backward": ("B", KIND_COLORS["backward"]),
    "reduce-scatter": ("RS", KIND_COLORS["optimizer"]),
}


def fsdp_lifecycle_figure(
    units: Sequence[str] = ("block 0", "block 1", "block 2"),
    reshard_after_forward: bool = True,
    width: int = FIGURE_WIDTH,
) -> go.Figure:
    """One row per unit, one column per step (fsdp_lifecycle_events); the bottom row counts
    the units whose full (gathered) weights are in memory after each step."""
    events = fsdp_lifecycle_events(units, reshard_after_forward)
    units = list(units)
    if len(units) > 6:
        raise ValueError(f"units: at most 6 fit the picture, got {len(units)}")
    step_w = 100.0 / len(events)
    fig, held = _Canvas(), set()
    last_fwd = len(units) * (3 if reshard_after_forward else 2) - 1  # forward phase ends
    for i, (u, action) in enumerate(events):
        label, color = _ACTIONS[action]
        row = units.index(u)
        x0 = 14 + i * step_w * 0.85
        draw_box(
            fig,
            x0,
            x0 + step_w * 0.8,
            -row * 5 - 2,
            -row * 5 + 2,
            color,
            f"<span style='color:white'>{label}</span>" if action != "free" else label,
            size=9,
        )
        held = held | {u} if action == "all-gather" else held - {u} if action == "free" else held
        fig.add_annotation(
            x=x0 + step_w * 0.4,
            y=-len(units) * 5 - 1,
            text=str(len(held)),
            showarrow=False,
            font=dict(size=10),
        )
    for row, u in enumerate(units):
        fig.add_annotation(
            x=0, y=-row * 5, text=f"<b>{u}</b>", showarrow=False, xanchor="left", font=dict(size=11)
        )
    fig.add_annotation(
        x=0,
        y=-len(units) * 5 - 1,
        text="full units<br>held",
        showarrow=False,
        xanchor="left",
        font=dict(size=10),
    )
    split = 14 + (last_fwd + 1) * step_w * 0.85 - step_w * 0.025
    fig.add_shape(
        type="line",
        x0=split,
        x1=split,
        y0=3.5,
        y1=-len(units) * 5 - 2.5,
        line=dict(color="#333333", width=1.5, dash="dot"),
    )
    for x, word in ((14, "forward →"), (split + 1, "backward (units in reverse) →")):
        fig.add_annotation(
            x=x, y=4.5, text=f"<b>{word}</b>", showarrow=False, xanchor="left", font=dict(size=11)
        )
    words = {
        "free": "drop full weights",
        "all-gather": "all-gather weights",
        "reduce-scatter": "reduce-scatter grads",
    }
    legend = [
        (f"{lab}: {words.get(name, name)}" if lab != name else f"free: {words[name]}", col)
        for name, (lab, col) in _ACTIONS.items()
    ]
    _legend(fig, legend, y=-len(units) * 5 - 5, x0=1, step=20)
    return fig.figure(
        (-1, 102),
        (-len(units) * 5 - 7, 6.5),
        width,
        160 + 45 * len(units),
        "FSDP: each unit's full weights exist only around its own compute "
        "(one rank; every rank runs the same steps)",
    )


DEFAULT_ROUTING = (((2, 0), (1, 3), (0, 1)), ((3, 1), (0, 1), (2, 3)))  # [rank][token] experts
DEFAULT_GATES = (((0.6, 0.4), (0.7, 0.3), (0.5, 0.5)), ((0.8, 0.2), (0.6, 0.4), (0.9, 0.1)))


def _routing(routing: Any, gates: Any, n_experts: int) -> tuple[list, list]:
    """Check routing[rank][token] = k expert ids and gates of the same shape."""
    ranks = sequence("routing", routing, lambda n, v: v, min_len=2)
    gate_ranks = sequence("gates", gates, lambda n, v: v, min_len=len(ranks))
    if len(gate_ranks) != len(ranks):
        raise ValueError(f"gates must have one entry per rank ({len(ranks)}), got {len(gates)}")
    k = None
    out_r, out_g = [], []
    for r, (toks, gtoks) in enumerate(zip(ranks, gate_ranks)):
        toks = sequence(f"routing[{r}]", toks, lambda n, v: v, min_len=1)
        gtoks = sequence(f"gates[{r}]", gtoks, lambda n, v: v, min_len=len(toks))
        if len(toks) > 4 or len(gtoks) != len(toks):
            raise ValueError(
                f"routing[{r}] / gates[{r}]: 1 to 4 tokens each, the same number; "
                f"got {len(toks)} and {len(gtoks)}"
            )
        for t, (ex, g) in enumerate(zip(toks, gtoks)):
            ex = sequence(
                f"routing[{r}][{t}]",
                ex,
                lambda n, v: whole(n, v, lo=0, hi=n_experts - 1),
                min_len=1,
            )
            g = sequence(f"gates[{r}][{t}]", g, lambda n, v: number(n, v, lo=0, hi=1))
            k = len(ex) if k is None else k
            if len(ex) != k or len(g) != k or len(set(ex)) != k:
                raise ValueError(
                    f"routing[{r}][{t}] must hold {k} distinct experts and "
                    f"gates[{r}][{t}] {k} weights; got {ex} and {g}"
                )
            out_r.append((r, t, ex))
            out_g.append(g)
    return out_r, out_g


def moe_dispatch_figure(
    routing: Any = DEFAULT_ROUTING,
    gates: Any = DEFAULT_GATES,
    n_experts: int = 4,
    width: int = FIGURE_WIDTH,
) -> go.Figure:
    """An expert-parallel MoE layer over ep = len(routing) ranks, rank r holding experts
    [r E/ep, (r+1) E/ep). Six columns, one row per (token, slot), coloured by its expert;
    lines follow each row: sort by expert (stable), all-to-all with the split sizes shown,
    experts, all-to-all back (same splits, swapped), then y[t] = sum of gate x expert output."""
    ep = len(sequence("routing", routing, lambda n, v: v, min_len=2))
    n_experts = pos_int("n_experts", n_experts)
    if n_experts % ep or n_experts > len(EXPERT_COLORS):
        raise ValueError(
            f"n_experts must be a multiple of the {ep} ranks and at most "
            f"{len(EXPERT_COLORS)}, got {n_experts}"
        )
    toks, gts = _routing(routing, gates, n_experts)
    per = n_experts // ep
    slots = [(r, t, e, g) for (r, t, ex), gs in zip(toks, gts) for e, g in zip(ex, gs)]
    cols: list[dict[int, list]] = [{r: [] for r in range(ep)} for _ in range(6)]
    for s in slots:
        cols[0][s[0]].append(s)
    for r in range(ep):
        cols[1][r] = sorted(cols[0][r], key=lambda s: s[2])  # stable: token order kept
        cols[4][r] = cols[1][r]
    for dst in range(ep):  # [source][expert] order
        cols[2][dst] = [s for src in range(ep) for s in cols[1][src] if s[2] // per == dst]
        cols[3][dst] = cols[2][dst]
    xs = (12, 28, 44, 60, 76, 89)
    box_w, row_h = (12, 12, 12, 12, 12, 2), 1.3
    height = [max(len(cols[c][r]) for c in range(5)) for r in range(ep)]
    tops = [-sum(h + 3 for h in height[:r]) * row_h for r in range(ep)]

    def y_of(c: int, r: int, i: int) -> float:
        return tops[r] - i * row_h

    fig = _Canvas()
    for c in range(5):
        for r in range(ep):
            for i, (src, t, e, g) in enumerate(cols[c][r]):
                label = (
                    f"t{t} → E{e}"
                    if c < 2
                    else f"r{src} t{t} → E{e}"
                    if c == 2
                    else f"E{e}(r{src} t{t})"
                    if c == 3
                    else f"E{e}(t{t})"
                )
                draw_box(
                    fig,
                    xs[c] - box_w[c] / 2,
                    xs[c] + box_w[c] / 2,
                    y_of(c, r, i) - 0.5,
                    y_of(c, r, i) + 0.5,
                    EXPERT_COLORS[e],
                    label,
                    size=9,
                )
                if c < 4:
                    nxt = cols[c + 1]
                    dst = r if c in (0, 2) else e // per if c == 1 else src
                    j = nxt[dst].index((src, t, e, g))
                    fig.add_segment(
                        [xs[c] + box_w[c] / 2, xs[c + 1] - box_w[c + 1] / 2],
                        [y_of(c, r, i), y_of(c + 1, dst, j)],
                        f"E{e}",
                        EXPERT_COLORS[e],
                    )
    for r in range(ep):
        for t in range(len(routing[r])):
            mine = [(e, g) for (src, tt, e, g) in slots if src == r and tt == t]
            terms = " + ".join(f"{g:g}·E{e}" for e, g in mine)
            fig.add_annotation(
                x=xs[5] - box_w[5] / 2,
                y=y_of(5, r, t),
                xanchor="left",
                text=f"y<sub>t{t}</sub> = {terms}",
                showarrow=False,
                font=dict(size=10),
            )
            for i, (src, tt, e, g) in enumerate(cols[4][r]):
                if tt == t:
                    fig.add_segment(
                        [xs[4] + box_w[4] / 2, xs[5] - box_w[5] / 2 - 0.3],
                        [y_of(4, r, i), y_of(5, r, t)],
                        f"E{e}",
                        EXPERT_COLORS[e],
                        "dot",
                    )
        experts = ", ".join(f"E{e}" for e in range(r * per, (r + 1) * per))
        fig.add_annotation(
            x=0,
            y=tops[r] - 1,
            text=f"<b>rank {r}</b><br>holds<br>{experts}",
            showarrow=False,
            xanchor="left",
            font=dict(size=10),
        )
        splits = [sum(1 for s in cols[1][r] if s[2] // per == d) for d in range(ep)]
        fig.add_annotation(
            x=xs[1],
            y=tops[r] - height[r] * row_h,
            showarrow=False,
            text=f"send splits {splits}",
            font=dict(size=9, color="#333333"),
        )
    heads = (
        "1. (token, slot):<br>x row, its expert",
        "2. sort by expert<br>(stable)",
        "3. all-to-all<br>(dispatch)",
        "4. experts run<br>their rows",
        "5. all-to-all back<br>(combine)",
        "6. unsort × gate<br>(sum per token)",
    )
    for x, h in zip(xs[:5] + (95,), heads):
        fig.add_annotation(x=x, y=2.2, text=f"<b>{h}</b>", showarrow=False, font=dict(size=10))
    bottom = tops[-1] - height[-1] * row_h - 1
    return fig.figure(
        (-1, 112),
        (bottom, 3.6),
        width,
        170 + 21 * sum(height),
        f"MoE dispatch and combine: {ep} ranks, {n_experts} experts, top-"
        f"{len(toks[0][2])}; send splits = rows to each rank",
    )


_LINK_WORDS = {
    "NVLink": "every group inside a node: <b>NVLink</b>",
    "network": "every group across nodes: <b>network</b>",
    "both": "some groups inside a node, some across: <b>both</b>",
}
LINK_COLORS = {"tp": "#4C78A8", "cp": "#54A24B", "dp": "#F58518", "pp": "#E45756"}


def mesh_links(sizes: dict, order: Sequence[str], gpus_per_node: int) -> list[dict]:
    """For each axis (innermost first): stride, rank 0's group, and the link its groups use:
    "NVLink" (every group inside one node), "network" (every group spans nodes) or "both".
    Ranks are numbered with the LAST axis of ``order`` fastest, as init_device_mesh does."""
    if not isinstance(sizes, dict) or not sizes:
        raise ValueError(f"sizes must be a dict axis -> size, e.g. dict(tp=2, dp=2), got {sizes!r}")
    sizes = {text("each axis in sizes", a): pos_int(f"sizes[{a!r}]", s) for a, s in sizes.items()}
    order = sequence("order", order, text)
    if sorted(order) != sorted(sizes):
        raise ValueError(f"order must name each axis of sizes once ({sorted(sizes)}), got {order}")
    world = math.prod(sizes.values())
    if world > 32:
        raise ValueError(f"sizes: {world} ranks in all; a picture shows at most 32")
    gpus_per_node = whole("gpus_per_node", gpus_per_node, lo=1, hi=8, hint="a row of the picture")
    if world % gpus_per_node:
        raise ValueError(f"gpus_per_node={gpus_per_node} must divide the {world} ranks")
    stride, rows = 1, []
    for axis in reversed(order):
        groups = {}
        for r in range(world):
            base = r - (r // stride % sizes[axis]) * stride
            groups.setdefault(base, []).append(r)
        spans = {len({g // gpus_per_node for g in grp}) > 1 for grp in groups.values()}
        link = "both" if len(spans) > 1 else "network" if spans.pop() else "NVLink"
        rows.append(dict(axis=axis, size=sizes[axis], stride=stride, group0=groups[0], link=link))
        stride *= sizes[axis]
    return rows


def mesh_hierarchy_figure(
    sizes: dict | None = None,
    order: Sequence[str] = ("pp", "dp", "cp", "tp"),
    gpus_per_node: int = 8,
    name: str = "",
    width: int = FIGURE_WIDTH,
) -> go.Figure:
    """Nodes as rows of GPU boxes (rank r on node r // gpus_per_node, with its mesh coordinates);
    an arc per axis joins rank 0's group along it; the lines below say which link every group of
    that axis uses. Default: 2 nodes x 8 GPUs, tp = cp = dp = pp = 2, torchtitan's order.
    ``name`` (e.g. "Llama 3") starts the title."""
    sizes = dict(tp=2, cp=2, dp=2, pp=2) if sizes is None else sizes
    links = mesh_links(sizes, order, gpus_per_node)
    world = math.prod(r["size"] for r in links)
    n_nodes, cell = world // gpus_per_node, 96.0 / gpus_per_node
    fig = _Canvas()

    def centre(r: int) -> tuple[float, float]:
        return 2 + (r % gpus_per_node + 0.5) * cell, -(r // gpus_per_node) * 16.0

    def coords(r: int) -> str:
        parts = [f"{row['axis']}{r // row['stride'] % row['size']}" for row in links[::-1]]
        return " ".join(parts[:2]) + "<br>" + " ".join(parts[2:])

    for n in range(n_nodes):
        fig.add_shape(
            type="rect",
            x0=1,
            x1=99,
            y0=-n * 16 - 5,
            y1=-n * 16 + 7.5,
            fillcolor="rgba(174,199,232,0.25)",
            line=dict(color="#777777", width=1),
        )
        fig.add_annotation(
            x=98.5,
            y=-n * 16 - 4,
            text=f"node {n}: NVLink inside",
            xanchor="right",
            showarrow=False,
            font=dict(size=10),
        )
    for r in range(world):
        x, y = centre(r)
        draw_box(
            fig,
            x - cell * 0.44,
            x + cell * 0.44,
            y - 2.8,
            y + 2.8,
            "white",
            f"<b>rank {r}</b><br>{coords(r)}",
            size=9,
        )
    for lane, row in enumerate(links):
        color, members = LINK_COLORS.get(row["axis"], "#333333"), row["group0"]
        for a, b in zip(members, members[1:]):
            (xa, ya), (xb, yb) = centre(a), centre(b)
            if ya == yb:
                top = ya + 4.5 + 1.6 * lane
                path = f"M {xa},{ya + 2.8} Q {(xa + xb) / 2},{top} {xb},{yb + 2.8}"
            else:
                path = f"M {xa},{ya - 2.8} Q {xa + 3 + 2 * lane},{(ya + yb) / 2} {xb},{yb + 2.8}"
            fig.add_shape(type="path", path=path, line=dict(color=color, width=2.5))
    base = -(n_nodes - 1) * 16 - 8
    for i, row in enumerate(links):
        fig.add_annotation(
            x=2,
            y=base - i * 3,
            xanchor="left",
            showarrow=False,
            font=dict(size=11),
            text=(
                f"<span style='color:{LINK_COLORS.get(row['axis'], '#333')}'>"
                f"<b>{row['axis']}</b></span> size {row['size']}, rank stride "
                f"{row['stride']}: rank 0's group {row['group0']}; "
                f"{_LINK_WORDS[row['link']]}"
            ),
        )
    order_s, name = ", ".join(order), text("name", name)
    return fig.figure(
        (0, 100),
        (base - 3 * len(links), 8),
        width,
        130 + 100 * n_nodes + 30 * len(links),
        f"{name + ': ' if name else ''}mesh order ({order_s}), outermost → "
        f"innermost, on {n_nodes} nodes × "
        f"{gpus_per_node} GPUs",
    )
