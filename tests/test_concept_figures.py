"""The concept pictures (issue 36, T6): each builds at the notebook width, draws what the code
does (bytes from calc, the dispatch order of expert_parallel, the mesh's rank numbering), and bad
input raises a ValueError naming the argument."""

from __future__ import annotations

import re

import plotly.io as pio
import pytest

from lab_utils.calc import GB, model_state_memory
from lab_utils.topology import Topology
from lab_utils.viz import concept_figures as cf
from lab_utils.viz.style import FIGURE_WIDTH


def _texts(fig) -> str:
    return " ".join(a.text for a in fig.layout.annotations)


def _valid(fig) -> None:
    assert fig.layout.width <= FIGURE_WIDTH
    pio.from_json(fig.to_json())  # plotly re-validates every property


def test_zero_partition_numbers_are_the_calculators():
    fig = cf.zero_partition_figure(7.5e9, "mixed_adam", 64)
    _valid(fig)
    texts = _texts(fig)
    for stage, want in enumerate((120.0, 31.4, 16.6, 1.9)):  # ZeRO paper Fig. 1
        got = model_state_memory(7.5e9, "mixed_adam", stage, 64).total / GB
        assert round(got, 1) == want and f"{want:.1f} GB" in texts
    for formula in ("16Ψ<", "4Ψ + 12Ψ/K", "2Ψ + 14Ψ/K", "16Ψ/K"):
        assert formula in texts
    assert "rank 63" in texts and "…" in texts and "rank 2" not in texts
    assert "8Ψ + 8Ψ/K" in _texts(cf.zero_partition_figure(1e9, "fp32_adam", 4))


def test_zero_partition_shards_sit_at_each_ranks_offset():
    fig = cf.zero_partition_figure(1e9, "mixed_adam", 4)
    coloured = [s for s in fig.layout.shapes if s.fillcolor not in ("white", None)]
    # 4 stages x 4 ranks x 3 buckets, plus 3 legend squares
    assert len(coloured) == 4 * 4 * 3 + 3
    optimizer = [s for s in coloured if s.fillcolor == cf.BUCKETS[2][1]][:-1]
    zero3 = optimizer[12:]  # the last stage's four ranks: four different quarters
    widths = {round(s.x1 - s.x0, 6) for s in zero3}
    offsets = {round(s.x0 - 22 - i * 21, 6) for i, s in enumerate(zero3)}  # within its column
    assert len(widths) == 1 and len(offsets) == 4


def test_fsdp_lifecycle_order_and_held_units():
    ev = cf.fsdp_lifecycle_events(["a", "b"])
    assert ev == [
        ("a", "all-gather"),
        ("a", "forward"),
        ("a", "free"),
        ("b", "all-gather"),
        ("b", "forward"),
        ("b", "free"),
        ("b", "all-gather"),
        ("b", "backward"),
        ("b", "reduce-scatter"),
        ("b", "free"),
        ("a", "all-gather"),
        ("a", "backward"),
        ("a", "reduce-scatter"),
        ("a", "free"),
    ]
    no_reshard = cf.fsdp_lifecycle_events(["a", "b"], reshard_after_forward=False)
    assert [a for u, a in no_reshard].count("all-gather") == 2
    held = 0  # without resharding, both units are full from their forward to their backward
    peaks = [held := held + {"all-gather": 1, "free": -1}.get(a, 0) for _, a in no_reshard]
    assert max(peaks) == 2 and peaks[-1] == 0
    fig = cf.fsdp_lifecycle_figure()
    _valid(fig)
    texts = _texts(fig)
    for word in ("forward →", "backward", "AG: all-gather", "RS: reduce-scatter", "block 2"):
        assert word in texts
    held = [a.text for a in fig.layout.annotations if a.text.isdigit()]
    assert len(held) == len(cf.fsdp_lifecycle_events(["block 0", "block 1", "block 2"]))
    assert max(map(int, held)) == 1 and held[-1] == "0"  # one unit at a time, none at the end


def test_moe_dispatch_follows_the_code_order():
    fig = cf.moe_dispatch_figure()
    _valid(fig)
    texts = _texts(fig)
    assert "send splits [4, 2]" in texts and "send splits [3, 3]" in texts
    assert "y<sub>t0</sub> = 0.6·E2 + 0.4·E0" in texts
    labels = [a.text for a in fig.layout.annotations]
    # rank 0 sorts its slots by expert, stable in token order (dispatch_and_combine's argsort)
    assert labels[12:18] == ["t0 → E0", "t2 → E0", "t1 → E1", "t2 → E1", "t0 → E2", "t1 → E3"]
    # rank 0 receives [source][expert]: its own four rows, then rank 1's three
    assert labels[24:31] == [
        "r0 t0 → E0",
        "r0 t2 → E0",
        "r0 t1 → E1",
        "r0 t2 → E1",
        "r1 t1 → E0",
        "r1 t0 → E1",
        "r1 t1 → E1",
    ]
    assert sorted(t.name for t in fig.data) == sorted(2 * ["E0", "E1", "E2", "E3"])
    # per (token, slot): 4 moves (solid), then 1 gate line into its token's sum (dotted)
    assert sum(t.x.count(None) for t in fig.data if t.line.dash == "solid") == 4 * 12
    assert sum(t.x.count(None) for t in fig.data if t.line.dash == "dot") == 12


def test_mesh_links_match_topology_numbering():
    rows = cf.mesh_links(dict(tp=2, dp=2, pp=2), ("pp", "dp", "tp"), 4)
    topo = Topology(dp=2, tp=2, pp=2)
    for row in rows:
        assert row["group0"] == topo.axis_ranks(row["axis"], 0)
    assert [r["link"] for r in rows] == ["NVLink", "NVLink", "network"]
    titan = cf.mesh_links(dict(tp=2, cp=2, dp=2, pp=2), ("pp", "dp", "cp", "tp"), 8)
    llama = cf.mesh_links(dict(tp=2, cp=2, dp=2, pp=2), ("dp", "pp", "cp", "tp"), 8)
    assert {r["axis"]: r["link"] for r in titan}["pp"] == "network"
    assert {r["axis"]: r["link"] for r in llama} == dict(
        tp="NVLink", cp="NVLink", pp="NVLink", dp="network"
    )
    mixed = cf.mesh_links(dict(tp=3, dp=4), ("dp", "tp"), 4)
    assert mixed[0]["link"] == "both"  # tp groups (0, 1, 2) inside node 0, (3, 4, 5) across
    fig = cf.mesh_hierarchy_figure(name="torchtitan")
    _valid(fig)
    texts = _texts(fig)
    assert all(f"rank {r}</b>" in texts for r in range(16)) and "node 1" in texts
    assert fig.layout.title.text.startswith("torchtitan: mesh order (pp, dp, cp, tp)")
    assert "rank 0's group [0, 8]; every group across nodes: <b>network</b>" in texts


@pytest.mark.parametrize(
    "build, field",
    [
        (lambda: cf.zero_partition_figure(dp=1), "dp"),
        (lambda: cf.zero_partition_figure(n_params=-1.0), "n_params"),
        (lambda: cf.zero_partition_figure(recipe_name="fp64"), "recipe"),
        (lambda: cf.fsdp_lifecycle_figure(units="block"), "units"),
        (lambda: cf.fsdp_lifecycle_figure(units=["a", "a"]), "units"),
        (lambda: cf.fsdp_lifecycle_figure(units=list("abcdefg")), "units"),
        (lambda: cf.fsdp_lifecycle_figure(reshard_after_forward="no"), "reshard_after_forward"),
        (lambda: cf.moe_dispatch_figure(n_experts=3), "n_experts"),
        (
            lambda: cf.moe_dispatch_figure(
                routing=[[(0, 9)], [(1, 2)]], gates=[[(0.5, 0.5)], [(0.5, 0.5)]]
            ),
            "routing[0][0]",
        ),
        (
            lambda: cf.moe_dispatch_figure(
                routing=[[(0, 1)], [(1, 2)]], gates=[[(0.5, 2.0)], [(0.5, 0.5)]]
            ),
            "gates[0][0]",
        ),
        (
            lambda: cf.moe_dispatch_figure(
                routing=[[(0, 1)], [(1,)]], gates=[[(0.5, 0.5)], [(1.0,)]]
            ),
            "routing[1][0]",
        ),
        (lambda: cf.moe_dispatch_figure(gates=[[(0.5, 0.5)]]), "gates"),
        (lambda: cf.mesh_hierarchy_figure(sizes=dict(tp=2, dp=2), order=("dp", "pp")), "order"),
        (lambda: cf.mesh_hierarchy_figure(sizes=dict(tp=2.0)), "sizes['tp']"),
        (lambda: cf.mesh_hierarchy_figure(gpus_per_node=3), "gpus_per_node"),
        (lambda: cf.mesh_hierarchy_figure(sizes=[2, 2]), "sizes"),
        (lambda: cf.mesh_hierarchy_figure(name=3), "name"),
        (lambda: cf.mesh_links(dict(tp=8, dp=8), ("dp", "tp"), 8), "sizes"),
        (lambda: cf.mesh_links(dict(tp=16), ("tp",), 16), "gpus_per_node"),
    ],
)
def test_bad_input_names_the_field(build, field):
    with pytest.raises(ValueError, match=f"^(each value in )?{re.escape(field)}"):
        build()
