"""Lab 04's table rows and figures (lab_utils.experiments.lab04.tables): the numbers they derive
against the calculators and by hand."""

from types import SimpleNamespace as NS

import pytest
import torch

from lab_utils.calc import DEVICES, LINKS, collective_time
from lab_utils.experiments.lab04 import tables


def test_max_grad_diff_over_ranks_and_names():
    ref = {"w": NS(grad=torch.zeros(3)), "b": NS(grad=torch.ones(1))}
    ranks = [{"w": torch.zeros(3), "b": torch.ones(1)}]
    ranks.append({"w": torch.tensor([0, -2.0, 0]), "b": torch.tensor([1.5])})
    assert tables.max_grad_diff(ranks, ref) == 2.0


def test_sampler_row_counts_repeats_and_drops():
    padded = tables.sampler_row(False, [[0, 1], [2, 0]], [[1, 0], [0, 2]], range(3))
    assert padded["repeated"] == 1 and padded["dropped"] == 0 and padded["per rank"] == 2
    dropped = tables.sampler_row(True, [[0], [2]], [[1], [0]], range(3))
    assert dropped["repeated"] == 0 and dropped["dropped"] == 1


def test_comm_and_hook_rows():
    c = NS(comm_bytes=1000.0, wire_bytes=1000.0 + 2 * 48 * 3, comm_count=2)
    row = tables.comm_rows({"torch": c}, formula=1000.0)[0]
    assert row["headers per all-reduce"] == 3 and row["all-reduces"] == 2
    none, fp16 = NS(wire_bytes=None, losses=[2.0, 1.0]), NS(wire_bytes=None, losses=[2.0, 1.25])
    hooks = {"none": none, "fp16": fp16}
    rows = tables.hook_rows(hooks, {"none": 100, "fp16": 50}, world=4)
    assert "ledger" not in rows[0] and rows[1]["vs none"] == 0.25
    assert rows[0]["formula"] == pytest.approx(2 * 3 / 4 * 400)  # ring: 2(N-1)/N of 4 B x 100


def test_allreduce_and_fit_rows_are_the_calculators():
    link = LINKS["IB-NDR"]
    row = tables.allreduce_rows(2.6e9, link, 10e-6, (64,))[0]
    seconds = collective_time("all_reduce", 64, 2.6e9, 10e-6, link.bytes_per_s)
    assert row["time (ms)"] == 1e3 * seconds
    assert row["of which latency (ms)"] < row["time (ms)"] and row["global batch (8/GPU)"] == 512
    h100 = DEVICES["H100-SXM5-80GB"]
    column = f"fits a {h100.memory_bytes / 1e9:.0f} GB {h100.name}?"
    fits = [r[column] for r in tables.fit_rows(h100, (1.3e9, 7e9))]
    assert fits == [True, False]  # 16 B/param: 21 GB fits, 112 GB does not


def test_figures_and_medians():
    sweep = [NS(cap_bytes=2048, buckets=4, step_s=[0.001, 0.003, 0.002])]
    assert tables.sweep_rows(sweep)[0]["ms/step"] == pytest.approx(2.0)
    assert tables.sweep_figure(sweep).data[0].y == (pytest.approx(2.0),)
    low = {"all-reduce every step": NS(bytes_sent=100, held_out=[3.0, 2.0])}
    assert tables.lowcomm_rows(low)[0]["x every-step"] == 1.0
    assert list(tables.lowcomm_figure(low, every=4).data[0].x) == [4, 8]
