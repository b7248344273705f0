"""gantt_figure / collective_state_figure: both event kinds, colours, labels, units, errors."""

from __future__ import annotations

import pytest

from lab_utils.calc import schedule
from lab_utils.viz import KIND_COLORS, collective_state_figure, gantt_figure, gantt_spec, kind_of


def _bars(fig):
    """(rank label, kind, start, end, text) of every bar, sorted."""
    out = []
    for tr in fig.data:
        for y, base, dur, txt in zip(tr.y, tr.base, tr.x, tr.text):
            out.append((y, tr.name, round(base, 9), round(base + dur, 9), txt))
    return sorted(out)


def test_ideal_events_become_one_bar_each_at_their_times():
    s = schedule("1f1b", 4, 8)
    fig = gantt_figure(s.events, title="1F1B")
    want = sorted(
        (
            f"rank {e.rank}",
            "forward" if e.kind == "F" else "backward",
            round(e.start, 9),
            round(e.end, 9),
            str(e.microbatch),
        )
        for e in s.events
    )
    assert _bars(fig) == want
    assert fig.layout.xaxis.title.text == "time (units of t_f)"
    assert fig.layout.title.text == "1F1B"
    # rank 0 on top: categories listed 0..p-1 on a reversed axis
    assert list(fig.layout.yaxis.categoryarray) == [f"rank {r}" for r in range(4)]
    assert fig.layout.yaxis.autorange == "reversed"


def test_kinds_have_fixed_colours_across_ideal_and_measured():
    ideal = gantt_figure(schedule("zb-h1", 4, 8).events)
    assert {t.name: t.marker.color for t in ideal.data} == {
        "forward": KIND_COLORS["forward"],
        "backward": KIND_COLORS["backward"],
        "weight-grad": KIND_COLORS["weight-grad"],
    }
    events = [
        dict(rank=r, name=n, start=10.0 + i + 0.1 * r, end=10.5 + i + 0.1 * r, mb=i)
        for r in range(2)
        for i, n in enumerate(["forward", "backward", "send", "all_reduce", "optimizer"])
    ]
    measured = gantt_figure(events)
    colours = {t.name: t.marker.color for t in measured.data}
    assert colours["forward"] == KIND_COLORS["forward"]
    assert colours["backward"] == KIND_COLORS["backward"]
    assert colours["comm"] == KIND_COLORS["comm"]  # send and all_reduce share "comm"
    assert colours["optimizer"] == KIND_COLORS["optimizer"]
    assert len(next(t for t in measured.data if t.name == "comm").x) == 4


def test_measured_dicts_shift_to_zero_and_hover_has_duration():
    events = [
        dict(rank=1, name="forward", start=100.25, end=100.75, mb=3, stage=1),
        dict(rank=0, name="backward", start=100.0, end=101.0, mb=2, stage=0),
    ]
    fig = gantt_figure(events)
    assert fig.layout.xaxis.title.text == "time (s)"
    bars = _bars(fig)
    assert bars == [("rank 0", "backward", 0.0, 1.0, "2"), ("rank 1", "forward", 0.25, 0.75, "3")]
    fwd = next(t for t in fig.data if t.name == "forward")
    assert fwd.hovertext[0] == (
        "rank 1<br>forward mb 3<br>start 0.25 s<br>end 0.75 s<br>duration 0.5 s"
    )


def test_color_by_meta_key_and_interleaved_chunk_labels():
    events = [dict(rank=0, name="forward", start=0, end=1, stage=s) for s in (0, 1)]
    fig = gantt_figure(events, color_by="stage")
    assert sorted(t.name for t in fig.data) == ["stage=0", "stage=1"]
    inter = gantt_figure(schedule("interleaved", 2, 4, 2).events)
    labels = {txt for t in inter.data for txt in t.text}
    assert {"0c0", "0c1", "3c1"} <= labels


def test_kind_of_aliases():
    assert [kind_of(n) for n in ("F", "fwd", "B", "W", "recv", "reduce_scatter", "step")] == [
        "forward",
        "forward",
        "backward",
        "weight-grad",
        "comm",
        "comm",
        "optimizer",
    ]


@pytest.mark.parametrize(
    "events, words",
    [
        ([], "empty"),
        ([dict(rank=0, name="forward", start=0.0)], "end"),
        ([dict(rank=0, name="forward", start=2.0, end=1.0)], "ends before it starts"),
        ([42], "cannot read"),
    ],
)
def test_bad_timelines_raise_readable_errors(events, words):
    with pytest.raises(ValueError, match=words):
        gantt_figure(events)


def test_collective_state_figure_shows_every_rank_before_and_after():
    before = [[1, 2], [3, 4], [5, 6]]
    after = {0: [9, 12], 1: None, 2: []}  # a reduce: only the root holds the result
    fig = collective_state_figure(before, after, "reduce")
    assert [list(r) for r in fig.data[0].z] == before
    assert [list(r) for r in fig.data[1].z] == [[9, 12], [None, None], [None, None]]
    assert [a.text for a in fig.layout.annotations] == ["before reduce", "after reduce"]
    assert list(fig.data[0].y) == ["rank 0", "rank 1", "rank 2"]
    with pytest.raises(ValueError, match="at least one rank"):
        collective_state_figure([], [], "all_reduce")


def test_dataclass_records_are_read_like_dicts():
    from dataclasses import dataclass

    @dataclass
    class Rec:
        rank: int
        name: str
        start: float
        end: float
        mb: int

    fig = gantt_figure([Rec(0, "F", 5.0, 6.0, 1), Rec(1, "B", 6.0, 8.0, 1)])
    assert _bars(fig) == [
        ("rank 0", "forward", 0.0, 1.0, "1"),
        ("rank 1", "backward", 1.0, 3.0, "1"),
    ]
    assert fig.layout.xaxis.title.text == "time (s)"


def test_bars_with_a_kind_share_one_legend_entry_and_colours_never_repeat():
    """Issue 37.5 (lab 11 cell 15): bars named "step 0".."step 9" of kind "step" made 14 legend
    entries over the title, their colours cycling; now one entry per kind, each bar labelled
    with its own name, the legend beside the plot, and no two entries share a colour."""
    events = [dict(rank=0, name=f"step {i}", kind="step", start=i, end=i + 0.9) for i in range(10)]
    events += [dict(rank=1, name=k, kind=k, start=0, end=1) for k in ("startup", "load", "crash")]
    spec = gantt_spec(events, title="elastic job")
    assert sorted(d["name"] for d in spec["data"]) == ["crash", "load", "startup", "step"]
    steps = next(d for d in spec["data"] if d["name"] == "step")
    assert list(steps["text"]) == [f"step {i}" for i in range(10)]
    assert spec["layout"]["legend"]["orientation"] == "v" and spec["layout"]["legend"]["x"] > 1
    many = gantt_spec([dict(rank=0, name=f"op{i}", start=i, end=i + 1) for i in range(14)])
    colors = [d["marker"]["color"] for d in many["data"]]
    assert len(colors) == 14 == len(set(colors))


def test_a_figure_whose_axis_runs_far_beyond_its_data_is_refused():
    """Issue 37.6 (lab 09 cell 35): add_hline(y=80, annotation_text=...) on a log axis put the
    annotation at 10^80 (plotly reads annotation positions on log axes as log10): the axis ran
    to 10^85 and flattened every bar. The check names the axis, the data span and the culprit."""
    import plotly.graph_objects as go

    from lab_utils.viz import axis_problems, checked, to_figure

    fig = go.Figure([go.Bar(x=["1", "64"], y=[500.0, 5.0]), go.Bar(x=["1", "64"], y=[20.0, 20.0])])
    fig.add_hline(y=80, line_dash="dot", annotation_text="80 GB")
    fig.update_layout(barmode="stack", yaxis=dict(type="log"))
    (problem,) = axis_problems(fig)
    assert "yaxis (log)" in problem and "'80 GB'" in problem and "1e+80" in problem
    with pytest.raises(ValueError, match="log10"):
        checked(fig)
    fig.update_layout(yaxis=dict(type="linear"))  # on a linear axis y=80 is 80: fine
    assert checked(fig) is fig
    with pytest.raises(ValueError, match="its range"):
        to_figure(
            {
                "data": [dict(type="scatter", x=[1, 2], y=[1, 2])],
                "layout": {"yaxis": {"range": [0, 1e6]}},
            }
        )
