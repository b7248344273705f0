"""Lab 07's table rows and figures (experiments/lab07/tables.py, figures.py) on hand-made runs:
each number is the formula or the recorded value it claims to be."""

from types import SimpleNamespace as NS

import pytest
import torch

from lab_utils.calc import bubble
from lab_utils.experiments.lab07 import figures, tables


def run(schedule, p=2, m=2, v=1, events=(), **kw):
    """A stand-in for a PipelineRun with the fields the rows read."""
    fields = dict(
        schedule=schedule,
        p=p,
        m=m,
        v=v,
        events=list(events),
        bubble=NS(mean=0.25, per_rank={0: 0.5, 1: 0.0}),
        steady_bubble=NS(max=0.125),
        peak_in_flight=[2, 1],
        peak_bytes=[100, 50],
    )
    return NS(**{**fields, **kw})


def test_in_flight_and_spread_rows_state_the_formulas():
    rows = tables.in_flight_rows({"1f1b": run("1f1b", 4, 8, peak_in_flight=[4, 3, 2, 1])}, 4, 8)
    assert rows == [
        {
            "schedule": "1f1b",
            "in flight (formula)": "[4.0, 3.0, 2.0, 1.0]",
            "in flight (measured)": "[4.0, 3.0, 2.0, 1.0]",
        }
    ]
    node = {"interleaved": run("interleaved", 4, 8, v=2)}
    spread = {"interleaved": run("interleaved", 4, 8, v=2, bubble=NS(mean=0.3))}
    (row,) = tables.spread_rows(node, spread, 4, 8)
    assert row["messages per step"] == 2 * 8 * (4 * 2 - 1)
    assert (row["one node (NVLink)"], row["one GPU per node (InfiniBand)"]) == (0.25, 0.3)
    assert row["formula (free messages)"] == pytest.approx(bubble("interleaved", 4, 8, 2).of_total)


def test_steady_rows_zb_h2_formula_is_zero():
    (row,) = tables.steady_rows([run("zb-h2", 4, 8)], 4, 8)
    assert row["formula"] == 0.0 and row[tables.STEADY] == 0.125 and row["one step alone"] == 0.25


def test_uneven_rows_gpipe_step_formula():
    events = [  # rank 0 computes 1 s, rank 1 2 s: per micro-batch k = [0.5, 1.0]
        dict(rank=0, name="F", start=0.0, end=1.0),
        dict(rank=1, name="F", start=1.0, end=3.0),
    ]
    (row,) = tables.uneven_rows([run("gpipe", events=events)], [1.0, 3.0], 2, 2)
    assert row["GPipe formula"] == pytest.approx(1.5 + 1 * 1.0)  # sum k + (m-1) max k
    assert row["same FLOPs, balanced"] == pytest.approx(3 * 1.5 / 2)
    assert row["step (emulated)"] == 3.0
    assert (row["stage costs, emulated"], row["stage costs, laptop CPU"]) == (
        "[1.0, 2.0]",
        "[1.0, 3.0]",
    )


def test_torch_rows_against_the_reference_and_calc():
    grads = {"w": torch.tensor([1.0, 2.0])}
    replayed = [dict(rank=0, start=0.0, end=1.0), dict(rank=1, start=0.5, end=1.0)]
    runs = [
        run("gpipe", loss=1.5, grads={"w": torch.tensor([1.0, 2.5])}, replayed=replayed,
            replayed_bubble=NS(mean=0.2)),
        run("interleaved-zb", v=2, loss=1.0, grads=grads, replayed=replayed,
            replayed_bubble=NS(mean=0.1)),
    ]  # fmt: skip
    gpipe, izb = tables.torch_rows(runs, 1.0, grads, 2, 4)
    assert (gpipe["class"], gpipe["|loss - ref|"], gpipe["max |grad - ref|"]) == (
        "ScheduleGPipe",
        0.5,
        0.5,
    )
    assert gpipe["formula"] == pytest.approx(bubble("gpipe", 2, 4).of_total)
    assert gpipe["replayed, own span"] == 0.0 and izb["formula"] is None


def test_figures_plot_the_formula_and_the_runs():
    by = {(s, m): run(s, 4, m) for s in ("gpipe", "1f1b") for m in (4, 8)}
    fig = figures.sweep_figure(by, 4, [4, 8])
    line, *marks = fig.data
    assert list(line.x) == list(range(1, 17))
    assert line.y[7] == pytest.approx(3 / 11)  # (p-1)/(m+p-1) at m = 8
    assert [list(t.y) for t in marks] == [[0.25, 0.25]] * 2
    bars = figures.peak_bytes_figure({"gpipe": run("gpipe")}, 2).data
    assert [list(b.y) for b in bars] == [[100, 50]]
