"""Lab 07's figures (plotly), assembled here so the notebook shows them in one call.

sweep_figure(by, p, ms)           the bubble against m: (p-1)/(m+p-1) and the emulated runs
peak_bytes_figure(real, p)        peak saved activations per stage, by schedule (measured)
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import plotly.graph_objects as go

from lab_utils.calc.pipeline import bubble


def sweep_figure(by: Mapping[tuple[str, int], Any], p: int, ms: Sequence[int]) -> go.Figure:
    """Lab 07 section 8: the formula's line (p-1)/(m+p-1) for m up to 2 max(ms), and the
    measured bubble of each ``by[(schedule, m)]`` run (GPipe and 1F1B) as markers."""
    grid = list(range(1, 2 * max(ms) + 1))
    line = [bubble("1f1b", p, m).of_total for m in grid]
    fig = go.Figure([go.Scatter(x=grid, y=line, name="(p-1)/(m+p-1)", mode="lines")])
    for name, sym in (("gpipe", "circle"), ("1f1b", "x")):
        fig.add_trace(
            go.Scatter(
                x=list(ms),
                y=[by[(name, m)].bubble.mean for m in ms],
                mode="markers",
                marker=dict(size=11, symbol=sym),
                name=f"{name} emulated",
            )
        )
    fig.update_layout(
        title=f"bubble (fraction of the step a rank idles), p = {p}, emulated cluster",
        xaxis_title="micro-batches m",
        yaxis_title="idle / total",
        height=340,
        width=700,
    )
    return fig


def peak_bytes_figure(real: Mapping[str, Any], p: int) -> go.Figure:
    """Lab 07 section 7: each schedule's peak saved-activation bytes per stage (``peak_bytes``
    of a real-compute run), one group of bars per stage."""
    stages = [f"stage {i}" for i in range(p)]
    fig = go.Figure([go.Bar(name=s, x=stages, y=r.peak_bytes) for s, r in real.items()])
    fig.update_layout(
        title="peak saved activations per stage (measured, real compute)",
        yaxis_title="bytes",
        height=320,
        width=760,
    )
    return fig
