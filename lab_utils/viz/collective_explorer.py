"""Collective-cost explorer: bytes per rank, alpha-beta time, algbw vs busbw (lab 03).

A thin view over ``calc.ring_bytes_per_rank``, ``calc.collective_time`` (ring vs tree) and
``calc.alg_bandwidth`` / ``calc.bus_bandwidth`` (nccl-tests PERFORMANCE.md). Sweeping N shows
the ring's latency term growing LINEARLY in N while its bytes per rank level off at 2D
(all-reduce); sweeping the message size shows latency-bound vs bandwidth-bound messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab_utils.calc import (
    LINKS,
    MB,
    alg_bandwidth,
    bus_bandwidth,
    collective_time,
    ring_bytes_per_rank,
)
from lab_utils.calc._check import choice, number, parse_number, whole
from lab_utils.calc.comm import OPS
from lab_utils.viz._base import Explorer, Spec
from lab_utils.viz.controls import dropdown, float_text, int_text
from lab_utils.viz.style import FIGURE_WIDTH

OP_COLORS = dict(
    zip(OPS, ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#9D755D"))
)
MAX_N = 100_000


@dataclass(frozen=True)
class CollectiveState:
    """Validated inputs in SI units: bytes, seconds, bytes/s."""

    op: str
    n: int
    size_bytes: float
    alpha_s: float
    bandwidth: float
    sweep: str  # "n": x axis is the number of ranks; "size": x axis is the message size


def validate(values: dict[str, Any]) -> CollectiveState:
    choice("op", values["op"], OPS)
    n = whole("N", values["n"], 2, MAX_N, hint="a collective over one rank moves nothing")
    size = number(
        "message D (MB)",
        values["size_mb"],
        0,
        1e9,
        lo_open=True,
        expected="a positive number below 1e9",
    )
    bw = number(
        "bandwidth (GB/s)",
        values["bandwidth_gbs"],
        0,
        1e9,
        lo_open=True,
        expected="a positive number below 1e9",
    )
    a = number("alpha (latency per step, µs)", values["alpha_us"], 0, 1e9)
    choice("x axis", values["sweep"], ("n", "size"))
    return CollectiveState(values["op"], n, size * MB, a * 1e-6, bw * 1e9, values["sweep"])


def sweep_points(st: CollectiveState) -> list[tuple[int, float]]:
    """(N, D) pairs along the x axis: N = 2..N (thinned when large) or D = 1 KB..max(1 GB, D)."""
    if st.sweep == "n":
        if st.n <= 128:
            ns = list(range(2, st.n + 1))
        else:  # ~100 points, geometric, always including the chosen N
            ns = sorted({round(2 * (st.n / 2) ** (i / 99)) for i in range(100)} | {st.n})
        return [(n, st.size_bytes) for n in ns]
    top = max(1e9, st.size_bytes)
    sizes = sorted({1e3 * (top / 1e3) ** (i / 40) for i in range(41)} | {st.size_bytes})
    return [(st.n, d) for d in sizes]


def _axes(
    i: int, x0: float, x1: float, xtitle: str, ytitle: str, logx: bool, logy: bool
) -> dict[str, Any]:
    s = "" if i == 1 else str(i)
    return {
        f"xaxis{s}": dict(
            domain=[x0, x1],
            anchor=f"y{s}",
            title=dict(text=xtitle),
            type="log" if logx else "linear",
        ),
        f"yaxis{s}": dict(
            anchor=f"x{s}",
            title=dict(text=ytitle),
            rangemode="tozero",
            type="log" if logy else "linear",
        ),
    }


def figure_spec(st: CollectiveState) -> Spec:
    """Three panels: bytes per rank (every op), time ring vs tree, algbw vs busbw."""
    pts = sweep_points(st)
    by_n = st.sweep == "n"
    xs = [n if by_n else d / MB for n, d in pts]
    xt = "N (ranks)" if by_n else "message size D (MB)"
    data: list[dict[str, Any]] = []
    for op in OPS:  # panel 1: what one rank sends, ring algorithm
        data.append(
            dict(
                type="scatter",
                mode="lines",
                name=op,
                legendgroup="bytes",
                x=xs,
                y=[ring_bytes_per_rank(op, n, d) / MB for n, d in pts],
                line=dict(color=OP_COLORS[op], width=3 if op == st.op else 1.2),
                xaxis="x",
                yaxis="y",
                hovertemplate=f"{op}<br>%{{x}}: %{{y:.4g}} MB sent per rank<extra></extra>",
            )
        )
    for alg, dash in (("ring", "solid"), ("tree", "dot")):  # panel 2: alpha-beta time
        total = [collective_time(st.op, n, d, st.alpha_s, st.bandwidth, alg) for n, d in pts]
        latency = [collective_time(st.op, n, 0.0, st.alpha_s, st.bandwidth, alg) for n, d in pts]
        color = "#4C78A8" if alg == "ring" else "#E45756"
        data.append(
            dict(
                type="scatter",
                mode="lines",
                name=f"{alg}: total time",
                x=xs,
                y=[t * 1e3 for t in total],
                line=dict(color=color, dash=dash),
                xaxis="x2",
                yaxis="y2",
                legendgroup="time",
                hovertemplate=f"{alg} total %{{y:.4g}} ms<extra></extra>",
            )
        )
        data.append(
            dict(
                type="scatter",
                mode="lines",
                name=f"{alg}: latency term only",
                x=xs,
                y=[t * 1e3 for t in latency],
                line=dict(color=color, dash=dash, width=1),
                opacity=0.55,
                xaxis="x2",
                yaxis="y2",
                legendgroup="time",
                hovertemplate=f"{alg} latency %{{y:.4g}} ms<extra></extra>",
            )
        )
    ring = [collective_time(st.op, n, d, st.alpha_s, st.bandwidth, "ring") for n, d in pts]
    alg = [alg_bandwidth(d, t) for (n, d), t in zip(pts, ring)]
    bus = [bus_bandwidth(st.op, n, a) for (n, _), a in zip(pts, alg)]
    for name, ys, color in (
        ("algbw = D / t (ring)", alg, "#54A24B"),
        ("busbw = algbw x factor", bus, "#B279A2"),
        ("link bandwidth", [st.bandwidth] * len(xs), "black"),
    ):
        data.append(
            dict(
                type="scatter",
                mode="lines",
                name=name,
                x=xs,
                y=[b / 1e9 for b in ys],
                xaxis="x3",
                yaxis="y3",
                legendgroup="bw",
                line=dict(color=color, dash="dash" if color == "black" else "solid"),
                hovertemplate=f"{name}: %{{y:.4g}} GB/s<extra></extra>",
            )
        )
    fixed = f"D = {st.size_bytes / MB:g} MB" if by_n else f"N = {st.n}"
    layout: dict[str, Any] = dict(
        width=FIGURE_WIDTH,
        height=440,
        margin=dict(l=60, r=20, t=90, b=50),
        title=dict(
            text=f"{st.op}, {fixed}, alpha = {st.alpha_s * 1e6:g} µs, "
            f"bandwidth = {st.bandwidth / 1e9:g} GB/s per direction"
        ),
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", font=dict(size=10)),
        annotations=[
            dict(
                text=t,
                x=x,
                y=1.02,
                xref="paper",
                yref="paper",
                showarrow=False,
                xanchor="center",
                yanchor="bottom",
                font=dict(size=12),
            )
            for t, x in (
                ("bytes sent per rank (ring), MB", 0.14),
                (f"{st.op} time (alpha-beta), ms", 0.5),
                ("bandwidth, GB/s (1 GB = 10^9 B)", 0.86),
            )
        ],
    )
    layout.update(_axes(1, 0.0, 0.28, xt, "MB per rank", not by_n, not by_n))
    layout.update(_axes(2, 0.36, 0.64, xt, "ms", not by_n, not by_n))
    layout.update(_axes(3, 0.72, 1.0, xt, "GB/s", not by_n, False))
    return {"data": data, "layout": layout}


def summary_html(st: CollectiveState) -> str:
    n, d, op = st.n, st.size_bytes, st.op
    sent = ring_bytes_per_rank(op, n, d)
    ring = collective_time(op, n, d, st.alpha_s, st.bandwidth, "ring")
    tree = collective_time(op, n, d, st.alpha_s, st.bandwidth, "tree")
    lat_ring = collective_time(op, n, 0.0, st.alpha_s, st.bandwidth, "ring")
    lat_tree = collective_time(op, n, 0.0, st.alpha_s, st.bandwidth, "tree")
    algbw = alg_bandwidth(d, ring)
    return (
        f"At N = {n}, D = {d / MB:g} MB: each rank sends <b>{sent / MB:.4g} MB</b> "
        f"({sent / d:.3f} D) with the ring. Time: ring <b>{ring * 1e3:.4g} ms</b> (latency "
        f"part {lat_ring * 1e6:.4g} µs, linear in N), tree <b>{tree * 1e3:.4g} ms</b> "
        f"(latency part {lat_tree * 1e6:.4g} µs, log N). Ring algbw "
        f"{algbw / 1e9:.4g} GB/s, busbw {bus_bandwidth(op, n, algbw) / 1e9:.4g} GB/s "
        f"(link {st.bandwidth / 1e9:g} GB/s)."
    )


class CollectiveExplorer(Explorer):
    """Collective cost vs N or message size. ``set(op="all_gather", n=64, sweep="size")``."""

    TITLE = "Collective-cost explorer"
    CSS = "collective-explorer"
    validate = staticmethod(validate)
    figure_spec = staticmethod(figure_spec)
    summary_html = staticmethod(summary_html)

    def __init__(self, **initial: Any) -> None:
        controls = {
            "op": dropdown("collective", list(OPS), "all_reduce"),
            "sweep": dropdown("x axis", [("ranks N", "n"), ("message size", "size")], "n"),
            "n": int_text("N (ranks; max when sweeping N)", 64),
            "size_mb": float_text("message D (MB)", 100.0),
            "link": dropdown("link preset", ["custom"] + list(LINKS), "IB-HDR"),
            "bandwidth_gbs": float_text("bandwidth (GB/s)", LINKS["IB-HDR"].bytes_per_s / 1e9),
            "alpha_us": float_text("alpha (µs per step)", 10.0),
        }
        super().__init__(controls, **initial)

    def on_control_change(self, change: dict[str, Any]) -> None:
        # A link preset fills the bandwidth; typing a bandwidth switches the preset to custom.
        link, bw = self.controls["link"], self.controls["bandwidth_gbs"]
        held, self._holding = self._holding, True
        try:
            if change["owner"] is link and link.value in LINKS:
                bw.value = LINKS[link.value].bytes_per_s / 1e9
            elif (
                change["owner"] is bw
                and link.value in LINKS
                and parse_number(bw.value) != LINKS[link.value].bytes_per_s / 1e9
            ):
                link.value = "custom"
        finally:
            self._holding = held


def collective_explorer(**initial: Any) -> CollectiveExplorer:
    """A ready-to-display collective-cost explorer (lab 03)."""
    return CollectiveExplorer(**initial)
