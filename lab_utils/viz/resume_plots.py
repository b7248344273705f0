"""Figures of lab 11: training losses around a resume from a checkpoint (a static plotly figure)."""

from __future__ import annotations

from typing import Mapping

import plotly.graph_objects as go

from lab_utils.viz.axis_check import checked


def resume_figure(curves: Mapping[str, Mapping[int, float]], resume_at: int) -> go.Figure:
    """Lab 11 section 3: each run's global mean loss by step (``curves[name][step]``), the
    elastic run dotted over the uninterrupted one, and a dashed line where the resume starts."""
    fig = go.Figure(
        [
            go.Scatter(
                x=sorted(c),
                y=[c[s] for s in sorted(c)],
                name=name,
                mode="lines+markers",
                line={"dash": "dot" if "elastic" in name else None},
            )
            for name, c in curves.items()
        ]
    )
    fig.add_vline(x=resume_at - 0.5, line_dash="dash", annotation_text="resume")
    fig.update_layout(
        height=340,
        xaxis_title="step",
        yaxis_title="global mean loss",
        title="the elastic run lies on the uninterrupted one; incomplete resumes leave it",
    )
    return checked(fig)
