"""The layout-equivalence matrix (lab_utils.correctness.matrix): its layouts, its bound, and
one 2-rank launch in which every technique must land on the verdict it earns."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lab_utils.correctness.matrix import (
    QUICK_PLANS,
    Compared,
    Plan,
    References,
    all_plans,
    compare,
    counts,
    illegal,
    layout_matrix,
    merge,
)


@pytest.fixture(scope="module")
def refs() -> References:
    return References.build(2)


def test_layout_names_the_bad_field():
    for kwargs, field in [
        ({"tp": 0}, "Plan.tp"),
        ({"dp_kind": "zero3"}, "Plan.dp_kind"),
        ({"schedule": "1f2b"}, "Plan.schedule"),
        ({"bug": "x"}, "Plan.bug"),
    ]:
        with pytest.raises(ValueError, match=field):
            Plan(**kwargs)


def test_illegal_layouts_say_why():
    assert "n_head" in illegal(Plan(tp=8))
    assert "n_layer" in illegal(Plan(pp=4, schedule="interleaved"))
    assert "dp only" in illegal(Plan(dp=2, tp=2, dp_kind="zero1"))
    assert "MoE layer on its own" in illegal(Plan(dp=2, ep=2))
    with pytest.raises(ValueError, match="tp8 cannot run: tp=8 does not divide"):
        layout_matrix([Plan(tp=8)])


def test_all_plans_are_legal_distinct_and_fit():
    layouts = all_plans(8)
    assert len({lay.name for lay in layouts}) == len(layouts)
    assert all(illegal(lay) is None and lay.size <= 8 for lay in layouts)
    families = {lay.family for lay in layouts}
    assert {"DP", "ZeRO", "FSDP", "TP", "PP", "CP", "EP", "composed", "control"} <= families
    assert {lay.schedule for lay in layouts if lay.pp > 1} == {
        "gpipe",
        "1f1b",
        "interleaved",
        "zb-h1",
        "zb-h2",
    }
    assert all(lay.size <= 4 for lay in QUICK_PLANS)


def test_bound_holds_for_float32_and_catches_a_bug(refs):
    ok = compare(refs.w32, refs)
    assert ok.ratio <= 1 and ok.bitwise
    w = {k: v.clone() for k, v in refs.w32.items()}
    w["head.weight"] += 1e-4  # far below one SGD update, far above float32 noise
    bad = compare(w, refs)
    assert bad.ratio > 1 and not bad.bitwise


def test_merge_refuses_a_layout_that_left_parameters_out(refs):
    held = Compared(names=["head.weight"])
    with pytest.raises(ValueError, match="dp2: no rank compared"):
        merge(Plan(dp=2), [held, None], set(refs.w32))
    with pytest.raises(ValueError, match="head.weight: reassembled"):
        compare({"head.weight": refs.w32["head.weight"][:3]}, refs)


def test_every_technique_on_two_ranks_earns_its_verdict():
    layouts = [
        Plan(),
        Plan(dp=2),
        Plan(dp=2, dp_kind="zero2"),
        Plan(dp=2, dp_kind="fsdp"),
        Plan(tp=2, sp=True),
        Plan(pp=2),
        Plan(pp=2, schedule="interleaved"),
        Plan(cp=2),
        Plan(ep=2),
        Plan(dp=2, bug="sum"),
    ]
    cells = layout_matrix(layouts, steps=2, timeout_s=120)
    got = {c.plan.name: c.verdict for c in cells}
    assert got.pop("1 rank") == "bitwise"  # the same ops in the same order, on a rank
    assert got.pop("dp2 BUG:sum") == "wrong"
    assert set(got.values()) == {"close"}, got
    assert counts(cells) == {"bitwise": 1, "close": len(layouts) - 2, "wrong": 1}
    assert replace(layouts[1], dp=1).name == "1 rank"


def test_heatmap_has_one_row_per_family_and_a_colour_per_verdict():
    from lab_utils.correctness.matrix import Cell
    from lab_utils.viz.layout_matrix import layout_matrix_figure

    cells = [
        Cell(Plan(), "bitwise", 0.1, 1e-7, 0.0),
        Cell(Plan(dp=2), "close", 0.1, 1e-7, 7e-9),
        Cell(Plan(dp=4), "close", 0.1, 1e-7, 7e-9),
        Cell(Plan(dp=2, bug="sum"), "wrong", 2e4, 1e-2, 1e-2),
    ]
    heat = layout_matrix_figure(cells).data[0]
    assert list(heat.y) == ["single", "DP", "control"]
    assert [list(r) for r in heat.z] == [[0, None], [1, 1], [2, None]]
    assert "dp2 BUG:sum" in heat.text[2][0]
    with pytest.raises(ValueError, match="cells is empty"):
        layout_matrix_figure([])


def test_a_reference_that_fails_is_reported_as_such(monkeypatch):
    from functools import partial

    import lab_utils.correctness.matrix as matrix

    blown_up = partial(matrix.reference_weights, lr=float("inf"))  # weights become inf, nan
    monkeypatch.setattr(matrix, "reference_weights", blown_up)
    with pytest.raises(ValueError, match="the float64 reference itself failed"):
        References.build(2)
