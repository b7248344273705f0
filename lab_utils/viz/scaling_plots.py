"""Figures of lab 10: a strong-scaling curve with its Amdahl fits, the FLOP/s of a matmul by size
(static plotly figures)."""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from lab_utils.viz.axis_check import checked
from lab_utils.viz.style import FIGURE_WIDTH

COLORS = ("#4C78A8", "#72B7B2", "#F58518")


def strong_scaling_figure(
    curves: Sequence, cores: int, global_batch: int, ideal_from: str = "simulated devices"
) -> go.Figure:
    """Measured step time vs N (markers), each curve's Amdahl fit T1 (s + (1-s)/N) (lines), the
    ideal T1/N of the `ideal_from` curve, and a shaded band where ranks outnumber the cores.

    ``curves``: lab_utils.experiments.lab10.CurveFit objects (label, ns, times, fit)."""
    n_max = max(max(c.ns) for c in curves)
    dense = [1 + i * (n_max - 1) / 60 for i in range(61)]
    fig = go.Figure()
    for color, c in zip(COLORS, curves):
        subset = any(
            c is not d and set(c.ns) < set(d.ns) and c.times == d.times[: len(c.ns)] for d in curves
        )
        if not subset:  # a curve whose points another curve already shows: its fit only
            fig.add_scatter(
                x=list(c.ns),
                y=[1e3 * t for t in c.times],
                mode="markers",
                name=f"measured: {c.label}",
                marker=dict(size=11, color=color),
            )
        if c.fit is not None:
            s, t1 = c.fit.serial_fraction, c.fit.t1
            fig.add_scatter(
                x=dense,
                y=[1e3 * t1 * (s + (1 - s) / n) for n in dense],
                mode="lines",
                name=f"Amdahl fit ({c.label}): s = {s:.3f}",
                line=dict(color=color, dash="dash" if subset else "solid"),
            )
    ref = next((c for c in curves if c.label == ideal_from), None)
    if ref is not None:
        fig.add_scatter(
            x=dense,
            y=[1e3 * ref.times[0] / n for n in dense],
            mode="lines",
            name=f"ideal T1/N ({ideal_from})",
            line=dict(color="grey", dash="dot"),
        )
    if n_max > cores:
        fig.add_vrect(
            x0=cores + 0.05,
            x1=n_max + 0.3,
            fillcolor="#E45756",
            opacity=0.07,
            line_width=0,
            annotation_text="more ranks than cores: real compute measures the machine",
            annotation_position="top left",
        )
    fig.update_layout(
        title=f"Strong scaling, global batch {global_batch} sequences: step time vs ranks",
        xaxis_title="N (ranks)",
        yaxis_title="step time (ms)",
        height=430,
        width=FIGURE_WIDTH,
    )
    return checked(fig)


def matmul_rate_figure(rates: Sequence) -> go.Figure:
    """Lab 10 section 6.3: the FLOP/s one core achieved on an n x n matmul, against n (log axis).

    ``rates``: lab_utils.experiments.lab10.MatmulRate objects (n, flops_per_s)."""
    fig = go.Figure(
        go.Scatter(
            x=[r.n for r in rates], y=[r.flops_per_s / 1e9 for r in rates], mode="lines+markers"
        )
    )
    fig.update_layout(
        title="One core: achieved FLOP/s of an n x n matmul",
        xaxis_title="n",
        xaxis_type="log",
        yaxis_title="GFLOP/s",
        height=330,
        width=700,
    )
    return checked(fig)
