"""Memory over a training step: stacked areas by kind, phases shaded (lab 01).

    from lab_utils.measure.step_memory import record_steps
    memory_timeline_figure(record_steps(model, opt, batches, loss_fn)).show()

A figure over measured ``MemoryPoint``s (``lab_utils.measure.step_memory``): x is the event
number (events are not evenly spaced in time; their order is what matters), y the bytes held,
stacked as parameters, gradients, optimizer state and saved activations. Forward, backward and
optimizer phases are shaded and every step is labelled, so the classic shape shows: the forward
ramp of activations, backward trading activations for gradients, and the optimizer state that
appears at the first ``optimizer.step()`` and stays.
"""

from __future__ import annotations

from typing import Any, Sequence

import plotly.graph_objects as go

from lab_utils.viz.axis_check import checked
from lab_utils.viz.style import FIGURE_WIDTH, LEGEND_BESIDE

KINDS = (
    ("params", "parameters", "#4C78A8"),
    ("grads", "gradients", "#F58518"),
    ("optimizer", "optimizer state", "#E45756"),
    ("activations", "saved activations", "#54A24B"),
)
PHASE_COLORS = {
    "forward": "rgba(84,162,75,0.08)",
    "backward": "rgba(245,133,24,0.08)",
    "optimizer": "rgba(228,87,86,0.12)",
}
UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def phase_spans(points: Sequence[Any]) -> list[tuple[int, int, int, str]]:
    """(first index, last index, step, phase) of each run of consecutive points in one phase."""
    spans: list[tuple[int, int, int, str]] = []
    for i, p in enumerate(points):
        if spans and spans[-1][2] == p.step and spans[-1][3] == p.phase:
            spans[-1] = (spans[-1][0], i, p.step, p.phase)
        else:
            spans.append((i, i, p.step, p.phase))
    return spans


def memory_timeline_figure(
    points: Sequence[Any], unit: str = "KB", title: str = "Memory of training steps (measured)"
) -> go.Figure:
    """Stacked bytes per kind at every event; phases shaded, peak marked."""
    if not points:
        raise ValueError("no memory points to draw: record at least one step")
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    scale = UNITS[unit]
    x = list(range(len(points)))
    labels = [f"step {p.step}, {p.phase}: {p.label}" for p in points]
    fig = go.Figure()
    for key, name, color in KINDS:
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[getattr(p, key) / scale for p in points],
                name=name,
                mode="lines",
                stackgroup="memory",
                line=dict(color=color, width=0.5, shape="hv"),
                customdata=labels,
                hovertemplate=f"%{{customdata}}<br>{name}: %{{y:.1f}} {unit}<extra></extra>",
            )
        )
    for first, last, step, phase in phase_spans(points):
        if phase in PHASE_COLORS:
            fig.add_vrect(
                x0=first - 0.5,
                x1=last + 0.5,
                fillcolor=PHASE_COLORS[phase],
                line_width=0,
                layer="below",
                annotation_text=phase if phase != "optimizer" else "opt.",
                annotation_position="top left",
                annotation_font_size=10,
            )
    peak = max(range(len(points)), key=lambda i: points[i].total)
    fig.add_annotation(
        x=peak, y=points[peak].total / scale, text="peak", showarrow=True, arrowhead=2, ay=-30
    )
    fig.update_layout(
        title=title,
        width=FIGURE_WIDTH,
        height=420,
        xaxis_title="event (forward: after each layer; backward: each finished gradient)",
        yaxis_title=f"bytes held ({unit})",
        hovermode="x unified",
        legend=LEGEND_BESIDE,
    )
    return checked(fig)


def profiled_memory_figure(
    times_s: Sequence[float],
    held_bytes: Sequence[int],
    ledger_peak: float,
    unit: str = "KB",
    title: str = "",
) -> go.Figure:
    """Bytes held over wall time from the profiler's memory events (lab 13), with the ledger's
    predicted peak (lab 01) as a dashed line."""
    div = UNITS[unit]
    fig = go.Figure(
        go.Scatter(
            x=list(times_s),
            y=[b / div for b in held_bytes],
            mode="lines",
            line=dict(shape="hv", color="#4C78A8"),
            name="profiled (torch.profiler, profile_memory)",
        )
    )
    fig.add_hline(
        y=ledger_peak / div,
        line=dict(dash="dash", color="#E45756"),
        annotation_text="lab 01 ledger peak",
        annotation_position="bottom right",
    )
    fig.update_layout(
        title=title or "memory held over the profiled steps",
        width=FIGURE_WIDTH,
        height=360,
        legend=LEGEND_BESIDE,
        xaxis_title="time (s, wall)",
        yaxis_title=f"bytes held ({unit})",
    )
    return checked(fig)
