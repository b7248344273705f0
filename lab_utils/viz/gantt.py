"""Per-rank timelines as Gantt charts, and what each rank holds around a collective (labs 03, 07).

``gantt_figure`` draws BOTH kinds of timeline the course produces with one look, so a learner can
put the ideal schedule (``lab_utils.calc.pipeline.schedule(...).events``) next to a measured one
(dicts ``{rank, name, start, end, mb?, stage?, ...}`` from the timeline recorder) and compare:
one row per rank (rank 0 on top), one colour per kind of work (forward / backward / weight-grad /
communication / optimizer), bars labelled with their micro-batch id.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, is_dataclass
from typing import Any, Iterable, Mapping, Sequence

import plotly.graph_objects as go

from lab_utils.calc.pipeline import Event as PipelineEvent
from lab_utils.viz.axis_check import checked
from lab_utils.viz.style import FIGURE_WIDTH, LEGEND_BESIDE

# One colour per kind of work, shared by ideal (F/B/W) and measured (forward/backward/...) events,
# so the same work looks the same in every lab.
KIND_COLORS: dict[str, str] = {
    "forward": "#4C78A8",  # blue
    "backward": "#F58518",  # orange
    "weight-grad": "#54A24B",  # green (zero-bubble W: weight gradient, deferred)
    "comm": "#B279A2",  # purple (send/recv, all-reduce, ...)
    "optimizer": "#E45756",  # red
    "idle": "#BAB0AC",  # grey
}
_ALIASES: dict[str, str] = {
    "f": "forward",
    "fwd": "forward",
    "forward": "forward",
    "b": "backward",
    "bwd": "backward",
    "backward": "backward",
    "backward_input": "backward",
    "w": "weight-grad",
    "wgrad": "weight-grad",
    "weight_grad": "weight-grad",
    "weight-grad": "weight-grad",
    "backward_weight": "weight-grad",
    "opt": "optimizer",
    "optim": "optimizer",
    "optimizer": "optimizer",
    "step": "optimizer",
    "optimizer_step": "optimizer",
    "idle": "idle",
    "wait": "idle",
    "bubble": "idle",
}
_COMM_WORDS = (
    "comm",
    "send",
    "recv",
    "reduce",
    "gather",
    "scatter",
    "broadcast",
    "all_to_all",
    "alltoall",
    "p2p",
    "isend",
    "irecv",
    "barrier",
)
# Colours for anything else (and for colour_by="mb" / "stage"): plotly's default cycle.
_PALETTE = (
    "#636EFA",
    "#EF553B",
    "#00CC96",
    "#AB63FA",
    "#FFA15A",
    "#19D3F3",
    "#FF6692",
    "#B6E880",
    "#FF97FF",
    "#FECB52",
)


@dataclass(frozen=True)
class _Bar:
    rank: int
    name: str
    start: float
    end: float
    meta: dict[str, Any]


def kind_of(name: str) -> str:
    """Map an event name ('F', 'forward', 'send', 'all_reduce', ...) to a colour family."""
    key = str(name).strip().lower()
    if key in _ALIASES:
        return _ALIASES[key]
    if any(word in key for word in _COMM_WORDS):
        return "comm"
    return key


def _normalise(events: Iterable[Any]) -> tuple[list[_Bar], bool]:
    """Read dicts, ``calc.pipeline.Event`` objects and other dataclass records into one
    shape; say whether the timeline is ideal (calc Events: times in units of t_f)."""
    bars, ideal = [], False
    for e in events:
        if isinstance(e, PipelineEvent):
            ideal = True
            rec: Mapping[str, Any] = {
                "rank": e.rank,
                "name": e.kind,
                "start": e.start,
                "end": e.end,
                "mb": e.microbatch,
                "chunk": e.chunk,
            }
        elif isinstance(e, Mapping):
            rec = e
        elif is_dataclass(e) and not isinstance(e, type):
            rec = asdict(e)  # e.g. a recorder's own event record
        else:
            raise ValueError(
                f"cannot read timeline event {e!r}: pass dicts with rank/name/"
                "start/end or lab_utils.calc.pipeline.Event objects"
            )
        missing = [k for k in ("rank", "start", "end") if k not in rec]
        if missing:
            raise ValueError(
                f"timeline event {dict(rec)!r} lacks {missing}; each event needs "
                "'rank', 'start', 'end' (and usually 'name')"
            )
        meta = {k: v for k, v in rec.items() if k not in ("rank", "name", "start", "end")}
        name = str(rec.get("name", rec.get("kind", "?")))
        rank, start, end = int(rec["rank"]), float(rec["start"]), float(rec["end"])
        if end < start:
            raise ValueError(
                f"event {name!r} on rank {rank} ends before it starts ({start} > {end})"
            )
        bars.append(_Bar(rank, name, start, end, meta))
    if not bars:
        raise ValueError("the timeline is empty: nothing to draw")
    return bars, ideal


def _row(rank: int, meta: Mapping[str, Any]) -> str:
    lane = meta.get("lane")
    return f"rank {rank} {lane}" if lane else f"rank {rank}"


def _group(bar: _Bar, color_by: str) -> str:
    """The legend entry of a bar: its record's "kind" when it has one ("step" for "step 3"),
    else its kind of work (``kind_of``), or ``color_by``'s value."""
    if color_by != "name":
        return f"{color_by}={bar.meta.get(color_by)}"
    return str(bar.meta["kind"]) if "kind" in bar.meta else kind_of(bar.name)


def _colors(keys: list[str], color_by: str) -> list[str]:
    """One colour per legend entry, never repeated: the kinds' own colours, then the palette
    (a sampled colour scale when there are more entries than palette colours)."""
    from plotly.colors import sample_colorscale

    own = [KIND_COLORS.get(k) if color_by == "name" else None for k in keys]
    others = sum(c is None for c in own)
    spare = iter(
        _PALETTE
        if others <= len(_PALETTE)
        else sample_colorscale("Turbo", [i / max(1, others - 1) for i in range(others)])
    )
    return [c or next(spare) for c in own]


def _label(bar: _Bar, show_chunk: bool) -> str:
    mb = bar.meta.get("mb", bar.meta.get("microbatch"))
    if mb is None:
        return ""
    return f"{mb}c{bar.meta.get('chunk', 0)}" if show_chunk else str(mb)


def gantt_spec(
    events: Iterable[Any],
    title: str = "",
    color_by: str = "name",
    time_unit: str | None = None,
    relative: bool = True,
    width: int = FIGURE_WIDTH,
    height: int | None = None,
) -> dict[str, Any]:
    """The figure of ``gantt_figure`` as plain dicts ``{"data": [...], "layout": {...}}``:
    what the bubble explorer pushes into the figure it keeps (dicts are ~10x cheaper to
    apply than validated plotly objects)."""
    bars, ideal = _normalise(events)
    unit = time_unit or ("units of t_f" if ideal else "s")
    t0 = min(b.start for b in bars) if relative else 0.0
    show_chunk = any(b.meta.get("chunk") for b in bars)
    # an event's optional "lane" (e.g. "compute", "comm": the streams of the emulated cluster,
    # lab_utils.twin) gives each rank one row per lane
    lanes = sorted({(b.rank, str(b.meta.get("lane", ""))) for b in bars})
    groups: dict[str, list[_Bar]] = {}
    for b in bars:
        groups.setdefault(_group(b, color_by), []).append(b)
    # Legend order: the canonical kinds first (forward, backward, ...), then the rest sorted.
    canon = list(KIND_COLORS)
    order = sorted(groups, key=lambda k: (canon.index(k) if k in canon else len(canon), k))
    data = []
    for key, color in zip(order, _colors(order, color_by)):
        grp = groups[key]
        data.append(
            dict(
                type="bar",
                orientation="h",
                name=key,
                y=[_row(b.rank, b.meta) for b in grp],
                base=[b.start - t0 for b in grp],
                x=[b.end - b.start for b in grp],
                # a bar grouped by its record's kind is labelled with its own name ("step 3")
                text=[
                    _label(b, show_chunk) or (b.name if "kind" in b.meta and b.name != key else "")
                    for b in grp
                ],
                textposition="inside",
                insidetextanchor="middle",
                marker=dict(color=color, line=dict(color="white", width=0.5)),
                # one preformatted string per bar: cheaper to send than a 2-D customdata
                hovertext=[
                    f"rank {b.rank}<br>{b.name} mb {_label(b, show_chunk) or '-'}<br>"
                    f"start {b.start - t0:.4g} {unit}<br>end {b.end - t0:.4g} {unit}<br>"
                    f"duration {b.end - b.start:.4g} {unit}"
                    for b in grp
                ],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    labels = [_row(r, {"lane": lane}) for r, lane in lanes]
    layout = dict(
        title=dict(text=title),
        barmode="overlay",
        bargap=0.25,
        width=width,
        height=height or min(600, max(260, 110 + 45 * len(labels))),  # fits 1280x800
        margin=dict(l=70, r=20, t=70 if title else 30, b=50),
        uniformtext=dict(minsize=8, mode="hide"),  # hide labels that do not fit a thin bar
        legend=LEGEND_BESIDE,
        xaxis=dict(title=dict(text=f"time ({unit})"), rangemode="tozero"),
        yaxis=dict(
            categoryorder="array", categoryarray=labels, autorange="reversed"
        ),  # rank 0 on top
    )
    return {"data": data, "layout": layout}


def gantt_figure(
    events: Iterable[Any],
    title: str = "",
    color_by: str = "name",
    time_unit: str | None = None,
    relative: bool = True,
    width: int = FIGURE_WIDTH,
    height: int | None = None,
) -> go.Figure:
    """Gantt chart of a per-rank timeline: one row per rank (rank 0 on top).

    ``events``: dicts ``{rank, name, start, end, **meta}`` (measured; ``mb``/``stage`` in meta
    are shown) or ``calc.pipeline.Event`` objects (ideal; kind F/B/W, microbatch, chunk).
    ``color_by``: "name" colours by kind of work (F/forward blue, B/backward orange, W green,
    comm purple, optimizer red) or any meta key ("mb", "stage", "chunk"). ``time_unit``: x-axis
    unit, default "s" for measured and "units of t_f" for ideal timelines. ``relative``: shift
    time so the first event starts at 0 (recorded clocks are arbitrary). Bars are labelled
    with the micro-batch id ("3c1" = micro-batch 3, model chunk 1 when interleaved).
    """
    spec = gantt_spec(events, title, color_by, time_unit, relative, width, height)
    return checked(go.Figure(spec))


def _rows(
    state: Mapping[int, Sequence[float] | None] | Sequence[Sequence[float] | None],
) -> list[list[float | None]]:
    items = sorted(state.items()) if isinstance(state, Mapping) else list(enumerate(state))
    return [list(v) if v is not None else [] for _, v in items]


def collective_state_figure(
    before: Mapping[int, Sequence[float] | None] | Sequence[Sequence[float] | None],
    after: Mapping[int, Sequence[float] | None] | Sequence[Sequence[float] | None],
    op: str = "all_reduce",
    width: int = 900,
) -> go.Figure:
    """What every rank holds before and after a collective, as two side-by-side grids.

    ``before`` / ``after``: per rank (list index or dict key) a vector of numbers, or None /
    [] when the rank holds nothing (e.g. non-root ranks after ``reduce``). Rows are ranks
    (rank 0 on top), columns are element indices; empty cells mean "not held". Lab 03.
    """
    from plotly.subplots import make_subplots

    grids = [_rows(before), _rows(after)]
    n_ranks = max(len(g) for g in grids)
    if n_ranks == 0:
        raise ValueError("give at least one rank's vector before and after the collective")
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=(f"before {op}", f"after {op}"), horizontal_spacing=0.08
    )
    flat = [x for g in grids for row in g for x in row if x is not None]
    lo, hi = (min(flat), max(flat)) if flat else (0.0, 1.0)
    for col, grid in enumerate(grids, start=1):
        n_cols = max([len(r) for r in grid] + [1])
        z = [row + [None] * (n_cols - len(row)) for row in grid]
        z += [[None] * n_cols for _ in range(n_ranks - len(z))]
        text = [["" if x is None else f"{x:g}" for x in row] for row in z]
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=[f"[{j}]" for j in range(n_cols)],
                y=[f"rank {r}" for r in range(n_ranks)],
                text=text,
                texttemplate="%{text}",
                zmin=lo,
                zmax=hi,
                colorscale="Blues",
                showscale=False,
                xgap=2,
                ygap=2,
                hovertemplate="%{y} element %{x}: %{z}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_yaxes(autorange="reversed", row=1, col=col)
        fig.update_xaxes(title="element", row=1, col=col)
    fig.update_layout(
        width=width, height=max(240, 100 + 50 * n_ranks), margin=dict(l=70, r=20, t=50, b=50)
    )
    return fig
