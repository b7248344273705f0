"""Lab 14's heatmap of the layout-equivalence matrix (lab_utils.correctness.matrix).

layout_matrix_figure(cells)   rows: technique families; one cell per layout, coloured by
                              its verdict (bitwise / close / wrong), labelled with the layout
                              and its largest distance from the float32 reference
"""

from __future__ import annotations

from typing import Any, Sequence

import plotly.graph_objects as go

from lab_utils.viz.style import FIGURE_WIDTH

VERDICTS = ("bitwise", "close", "wrong")
COLOURS = ("#2ca02c", "#9ecae1", "#d62728")  # green, pale blue, red


def layout_matrix_figure(cells: Sequence[Any], width: int = FIGURE_WIDTH) -> go.Figure:
    """One row per family (``cell.plan.family``), its layouts side by side. ``cells``: the
    ``Cell`` list of ``layout_matrix`` (fields layout, verdict, err32, ratio)."""
    if not cells:
        raise ValueError("cells is empty: run layout_matrix first")
    families: list[str] = []
    for c in cells:
        if c.plan.family not in families:
            families.append(c.plan.family)
    rows = {f: [c for c in cells if c.plan.family == f] for f in families}
    ncol = max(len(r) for r in rows.values())
    z = [[None] * ncol for _ in families]
    text = [[""] * ncol for _ in families]
    hover = [[""] * ncol for _ in families]
    for i, f in enumerate(families):
        for j, c in enumerate(rows[f]):
            z[i][j] = VERDICTS.index(c.verdict)
            text[i][j] = f"{c.plan.name}<br>{c.err32:.0e}" if c.err32 else c.plan.name
            hover[i][j] = (
                f"{c.plan.name}: {c.verdict}; max |w - w32| = {c.err32:.2e}, "
                f"|w - w64| / bound = {c.ratio:.2g}"
            )
    # a stepped colour scale: verdict k (z = 0, 1, 2) owns the band [k/3, (k+1)/3]
    scale = [[(k + edge) / 3, col] for k, col in enumerate(COLOURS) for edge in (0, 1)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            text=text,
            texttemplate="%{text}",
            customdata=hover,
            zmin=-0.5,
            zmax=2.5,
            colorscale=scale,
            xgap=3,
            ygap=3,
            y=families,
            hovertemplate="%{customdata}<extra></extra>",
            colorbar=dict(tickvals=[0, 1, 2], ticktext=list(VERDICTS), title="verdict"),
        )
    )
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(
        title="Final weights after k steps vs one process (measured; cell text: max |w - w32|)",
        width=width,
        height=70 * len(families) + 120,
        margin=dict(t=60, l=80, r=20, b=20),
        font_size=10,
    )
    return fig
