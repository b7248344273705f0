"""Lab 09's table rows and figures (experiments/lab09/views.py) on hand-made inputs and on
calc's presets: each column is the field, the formula or the sum it claims to be."""

from types import SimpleNamespace as NS

import pytest
import torch

from lab_utils.calc import GB, MOE_PRESETS, all_to_all_bytes_per_layer, moe_memory_per_rank
from lab_utils.experiments.lab09 import views
from lab_utils.measure import GLOO_HEADER_BYTES


def test_routing_and_load_rows():
    r = NS(
        expert_idx=torch.tensor([[0, 1], [1, 0]]),
        gate=torch.tensor([[0.75, 0.25], [0.5, 0.5]]),
        keep=torch.tensor([[True, True], [True, False]]),
    )
    rows = views.routing_rows(r)
    assert len(rows) == 2 and rows[1]["2nd expert"] == 0 and rows[1]["kept 2"] is False
    assert views.load_rows([3, 1], [2, 1]) == [
        {"expert": 0, "assignments": 3, "kept": 2, "dropped": 1},
        {"expert": 1, "assignments": 1, "kept": 1, "dropped": 0},
    ]


def test_ep_bytes_rows_count_the_headers():
    splits = {"counts": 16, "dispatch": 100, "combine": 100}
    row = NS(
        rank=0,
        bytes_uniform=96,
        bytes_ledger={"counts": 16, "dispatch": 96, "combine": 96},
        bytes_splits=splits,
        bytes_wire={"forward": 216 + 27 * GLOO_HEADER_BYTES},
    )
    (out,) = views.ep_bytes_rows([row])
    assert out["fwd: ledger"] == 208 and out["fwd: splits"] == 216
    assert out["fwd: formula (uniform)"] == 16 + 2 * 96
    assert out["(wire - splits) / 48 B"] == 27


def test_skew_and_mesh_rows():
    assert views.skew([4, 0, 2, 2]) == 2.0
    mesh = [NS(losses=[1.0, 0.5], ref_losses=[1.0, 0.5]), NS(losses=[1.0, 0.75], ref_losses=[])]
    rows = views.mesh_loss_rows(mesh)
    assert [r["max |diff| over ranks"] for r in rows] == [0.0, 0.25]
    r0 = NS(comm={"dispatch": {"ops": {"all_to_all": 2}, "bytes": 8, "wire": 9}}, formula={})
    assert views.phase_rows(r0)[0]["collectives"] == "2 all_to_all"


def test_state_and_traffic_rows_are_calc_numbers():
    cfg = MOE_PRESETS["deepseek-v3"]
    (row,) = views.state_rows(cfg, [("EP64", dict(ep=64, dp=2, pp=16))])
    m = moe_memory_per_rank(cfg, ep=64, dp=2, pp=16)
    assert row["total (GB)"] == pytest.approx(m.total / GB)
    a2a = all_to_all_bytes_per_layer(4096, 7168, 8, 64, dispatch_bytes=1, combine_bytes=2)
    rows = views.traffic_rows(a2a, m, 3.0)
    assert rows[1]["GB"] == pytest.approx(3 * rows[0]["GB"]) == pytest.approx(3 * a2a.step / GB)


def test_plans_and_figures():
    plans = [NS(layout=(8, 256, 64)), NS(layout=(16, 128, 64))]
    assert views.rank_of_published(plans) == 1
    bars = views.ep_memory_figure(MOE_PRESETS["deepseek-v3"], (1, 64)).data
    assert [list(b.x) for b in bars] == [["1", "64"]] * 2
    bal = NS(
        tokens_per_expert={0.0: [[4, 4], [8, 0]], 1.0: [[4, 4], [5, 3]]},
        capacity=[{"aux coef": c, "dropped %": 1.0, "padded buffer rows": 10} for c in (0.0, 1.0)],
    )
    runs = ((0.0, "off"), (1.0, "on"))
    assert [list(b.y) for b in views.balance_figure(bal, runs, 5).data] == [[4, 4], [8, 0], [5, 3]]
    assert views.capacity_rows(bal, 64)[0]["padded buffer (KB)"] == pytest.approx(0.64)
    assert len(views.capacity_figure(bal, runs, [1.0], 64).data) == 3
