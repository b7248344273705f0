"""Lab 02's table and figure helpers (lab02.views, fp8.cast_rows): rows as the lab reads them."""

import math
from types import SimpleNamespace as NS

import torch

from lab_utils.experiments.lab02 import fp8, views


def test_run_rows_summarise_each_training_log():
    runs = {"a": {"loss": [4.0, 1.0], "zero_grads": [0.5, 1.0], "skipped": [1]}}
    runs["b"] = {"loss": [4.0, math.nan], "zero_grads": [0.0, 0.0], "skipped": []}
    a, b = views.run_rows(runs)
    assert (a["first loss"], a["last loss"], a["zero grads"], a["skipped steps"]) == (4, 1, 0.75, 1)
    assert not a["NaN?"] and b["NaN?"] and b["skipped steps"] == 0


def test_checkpoint_rows_name_segments_and_time_ratio():
    run = NS(after_forward=2e6, peak=3e6, block_forwards=8, time_s=0.5)
    rows = views.checkpoint_rows({0: run, 2: NS(**{**vars(run), "time_s": 1.0})}, 8)
    assert [(r["blocks per segment k"], r["segments"]) for r in rows] == [("none", "-"), (2, 4)]
    assert rows[1]["vs none"] == 2.0 and rows[0]["peak (MB)"] == 3.0


def test_sharpness_rows_rename_the_sweep_fields():
    run = NS(seed=0, batch=4, noise=0.01, steps=9, train_loss=0.1, sharpness=2.0, test_acc=0.9)
    (row,) = views.sharpness_rows([run])
    assert row == {
        "seed": 0,
        "batch": 4,
        "noise lr/B": 0.01,
        "steps": 9,
        "train loss": 0.1,
        "sharpness": 2.0,
        "test acc": 0.9,
    }


def test_figures_draw_one_trace_per_run():
    log = {"loss": [2.0, 1.0], "scale": [2.0**8, 2.0**4, 2.0**5], "skipped": [1]}
    assert len(views.loss_figure({"a": log, "b": log}).data) == 2
    assert list(views.scale_figure(log).data[1].y) == [4.0]  # log2 of the skipped step's scale
    assert [t.name for t in views.lr_figure({"r": ([8, 16], [2.0, 1.0])}).data] == ["r"]
    sweep = {0: NS(peak=4e6), 2: NS(peak=2e6)}
    fig = views.segments_figure({4: 2}, sweep, {4: NS(memory=2.5e6)})
    assert [list(t.y) for t in fig.data] == [[2.0], [2.5]]


def test_cast_rows_are_cast_report_over_every_case():
    g = torch.tensor([1e-9, 1e-3, 0.5, 3.0])
    rows = fp8.cast_rows(g)
    assert len(rows) == 8  # 2 magnitudes x 2 formats x 2 scalings
    last = rows[-1]
    assert (last["tensor"], last["format"], last["scaling"]) == ("x 1e6", "e5m2", "current")
    r = fp8.cast_report(g * 1e6, "e5m2", last["scale"])
    assert (last["overflowed"], last["flushed to 0"], last["rel. error"]) == (
        r.saturated,
        r.flushed,
        r.rel_error,
    )
