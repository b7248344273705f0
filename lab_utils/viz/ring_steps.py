"""Lab 03's pictures of the ring: the chunks after every step, and who sends to whom.

ring_steps_figure(trace)        one small rank x chunk grid per ring step
(experiments.lab03.ring_trace)
send_matrix_figure(matrix, ..)  rank x rank heatmap of bytes sent
(experiments.lab03.who_sends_to_whom)
"""

from __future__ import annotations

from typing import Any, Sequence

import plotly.graph_objects as go

from lab_utils.viz.style import FIGURE_WIDTH


def _label(held: Sequence[int], n: int) -> str:
    if len(held) == n:
        return "ALL"
    return "+".join(str(r) for r in held)


def ring_steps_figure(trace: Any, width: int = FIGURE_WIDTH) -> go.Figure:
    """One grid per step of a ring all-reduce: rows are ranks, columns chunks; a cell names the
    ranks whose contributions that chunk holds summed ("0+1", "ALL" = the finished sum); the
    colour is how many. The chunk a rank sent during the step is outlined. ``trace``: a
    ``RingTrace`` (fields ``n`` and ``steps`` = [(label, sent per rank, held per rank)])."""
    from plotly.subplots import make_subplots

    n, steps = trace.n, trace.steps
    cols = min(len(steps), 4)
    rows = -(-len(steps) // cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[s[0] for s in steps],
        horizontal_spacing=0.04,
        vertical_spacing=0.12,
    )
    for k, (label, sent, held) in enumerate(steps):
        row, col = k // cols + 1, k % cols + 1
        z = [[len(c) for c in held[r]] for r in range(n)]
        text = [[_label(c, n) for c in held[r]] for r in range(n)]
        fig.add_trace(
            go.Heatmap(
                z=z,
                text=text,
                texttemplate="%{text}",
                zmin=1,
                zmax=n,
                colorscale="Blues",
                showscale=False,
                xgap=2,
                ygap=2,
                x=[f"c{c}" for c in range(n)],
                y=[f"rank {r}" for r in range(n)],
                hovertemplate="%{y}, chunk %{x}: sum of ranks %{text}<extra>" + label + "</extra>",
            ),
            row=row,
            col=col,
        )
        for r, c in enumerate(sent):
            if c is not None:  # the chunk this rank sent right during this step
                fig.add_shape(
                    type="rect",
                    x0=c - 0.5,
                    x1=c + 0.5,
                    y0=r - 0.5,
                    y1=r + 0.5,
                    line=dict(color="#d62728", width=2),
                    row=row,
                    col=col,
                )
    fig.update_yaxes(autorange="reversed", showticklabels=True)
    fig.update_layout(
        title=f"Ring all-reduce on {n} ranks, measured after every step "
        "(cell: ranks summed into that chunk; red box: the chunk sent)",
        width=width,
        height=230 * rows + 60,
        margin=dict(t=80, l=60, r=20, b=30),
        font_size=11,
    )
    return fig


def send_matrix_figure(
    matrix: Sequence[Sequence[float]], title: str, width: int = 420
) -> go.Figure:
    """Heatmap of M[i][j] = bytes rank i sent to rank j (rows: senders, columns: receivers)."""
    n = len(matrix)
    text = [[f"{v / 1e6:.2f} MB" if v >= 1e5 else f"{v:,.0f} B" for v in row] for row in matrix]
    fig = go.Figure(
        go.Heatmap(
            z=[list(row) for row in matrix],
            text=text,
            texttemplate="%{text}",
            colorscale="Blues",
            showscale=False,
            xgap=2,
            ygap=2,
            x=[f"to {j}" for j in range(n)],
            y=[f"rank {i}" for i in range(n)],
            hovertemplate="%{y} sent %{x}: %{z:,} B<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(
        title=title, width=width, height=320, margin=dict(t=60, l=60, r=20, b=40), font_size=11
    )
    return fig
