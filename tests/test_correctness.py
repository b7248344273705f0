"""The differential bisector and the bug zoo (lab_utils.correctness): every bug found at its op,
every fix clean (one 4-rank launch for the whole zoo); bad input named, not compared."""

import pytest
import torch

from lab_utils.cli import main as cli_main
from lab_utils.correctness import (
    Case,
    FlatShard,
    Layout,
    LayoutError,
    Partial,
    Replicate,
    Shard,
    bisect,
    reassemble,
    replicated,
)
from lab_utils.correctness.bisector import judge, reference_events
from lab_utils.correctness.compare import compare
from lab_utils.correctness.zoo import BUGS, run_zoo


def test_every_zoo_bug_is_found_at_its_op_and_every_fix_is_clean():
    assert len(BUGS) >= 10
    rows = run_zoo()
    bad = [
        f"{r.bug}: named {r.named!r}, expected {r.expected!r}, fixed {r.fixed}: {r.detail}"
        for r in rows
        if not r.ok
    ]
    assert not bad, "\n".join(bad)
    by_name = {r.bug: r for r in rows}
    # the pieces that are wrong, not the whole tensor: ranks 1 and 2 took the wrong TP shard,
    # rank 0's positions lie in the first document, where causal = document-causal
    assert "ranks [1, 2]," in by_name["tp_mesh_order"].detail
    assert "ranks [1, 2, 3]," in by_name["cp_packed_docs"].detail
    assert "exactly 4 x the reference" in by_name["sum_vs_avg"].detail
    assert max(r.fixed_margin for r in rows) < 0.5  # the fixes sit well inside the bound


def test_reassemble_shards_replicas_partials_and_flat_shards():
    full = torch.arange(24.0).view(4, 6)
    # dp x tp: rows over dp, columns over tp
    pieces = {0: full[:2, :3], 1: full[:2, 3:], 2: full[2:, :3], 3: full[2:, 3:]}
    [(t, ranks)] = reassemble(
        "w", Layout(((0, 1), (2, 3)), (Shard(0), Shard(1))), pieces, full.shape
    )
    assert torch.equal(t, full.double()) and ranks == (0, 1, 2, 3)
    reps = reassemble(
        "w",
        Layout(((0, 1), (2, 3)), (Replicate(), Shard(1))),
        {0: full[:, :3], 1: full[:, 3:], 2: full[:, :3], 3: full[:, 3:]},
        full.shape,
    )
    assert [r for _, r in reps] == [(0, 1), (2, 3)]
    [(s, _)] = reassemble(
        "loss",
        Layout((0, 1), (Partial("avg"),)),
        {0: torch.tensor(1.0), 1: torch.tensor(3.0)},
        torch.Size([]),
    )
    assert float(s) == 2.0
    flat = torch.cat([full.flatten(), torch.zeros(2)])  # padded to 26 = 2 x 13
    [(f, _)] = reassemble(
        "w", Layout((0, 1), (FlatShard(),)), {0: flat[:13], 1: flat[13:]}, full.shape
    )
    assert torch.equal(f, full.double())


def test_a_layout_that_cannot_be_reassembled_names_the_tensor_and_the_layout():
    layout = Layout((0, 1), (Shard(0),))
    with pytest.raises(LayoutError, match=r"'fc1.weight'.*Shard\(0\).*\(5, 3\)"):
        reassemble(
            "fc1.weight", layout, {0: torch.ones(2, 3), 1: torch.ones(3, 3)}, torch.Size([4, 3])
        )
    with pytest.raises(LayoutError, match=r"'fc1.weight'.*Shard\(1\).*cannot be combined"):
        reassemble(
            "fc1.weight",
            Layout((0, 1), (Shard(1),)),
            {0: torch.ones(2, 3), 1: torch.ones(3, 3)},
            torch.Size([2, 6]),
        )
    with pytest.raises(LayoutError, match=r"'emb.weight'.*ranks \[1\] recorded no piece"):
        reassemble("emb.weight", replicated((0, 1)), {0: torch.ones(2)}, torch.Size([2]))
    with pytest.raises(ValueError, match="2 axes but 1 placements"):
        Layout(((0, 1), (2, 3)), (Shard(0),))


def _one_weight(rec):
    rec.grad("w", torch.ones(4, 3, dtype=torch.float64))


def _declares_shards_of_a_replica(env, rec):
    rec.grad("w", torch.ones(4, 3), Layout((0, 1, 2, 3), (Shard(0),)))  # each rank: all of it


def test_bisect_refuses_pieces_that_do_not_fit_their_layout():
    case = Case("wrong layout", 4, _declares_shards_of_a_replica, _one_weight)
    with pytest.raises(
        LayoutError,
        match=r"'grad w', layout mesh \(0, 1, 2, 3\) \[Shard\(0\)\]"
        r".*shape \(16, 3\) but the reference has \(4, 3\)",
    ):
        bisect(case)
    with pytest.raises(TypeError, match="a Case or a sequence of Cases"):
        bisect("sum_vs_avg")


def _nan_reference(rec):
    rec.loss(torch.tensor(float("nan"), dtype=torch.float64))


def _unused_step(env, rec):
    raise AssertionError("judge() is given the ranks' pieces; no step runs")


def test_a_nan_reference_is_reported_as_such_not_as_a_bug():
    case = Case("nan", 2, _unused_step, _nan_reference)
    ranks = [({"loss": (torch.tensor(1.0), Layout((0, 1), (Partial(),)))}, {})] * 2
    report = judge(case, reference_events(case), ranks)
    assert report.verdict == "reference failed" and report.op == "loss"
    assert report.divergence is None


def test_the_diagnosis_names_a_factor_of_the_group_size_and_disagreeing_replicas():
    ref = torch.linspace(-1, 1, 10, dtype=torch.float64)
    div, _ = compare("grad w", ref, [(4 * ref, (0, 1, 2, 3))], torch.float32, 100)
    assert "exactly 4 x" in div.diagnosis
    div, _ = compare("grad w", ref, [(ref, (0,)), (ref / 2, (1,))], torch.float32, 100)
    assert "replicas disagree" in div.diagnosis and div.ranks == (1,)
    ok, ratio = compare("grad w", ref, [(ref.float().double(), (0,))], torch.float32, 100)
    assert ok is None and ratio < 1


def sum_vs_avg_fixed():
    return BUGS[0].fixed


def test_cli_bisects_one_bug_and_its_fix(capsys):
    assert cli_main(["bisect", "accum_undivided"]) == 1
    out = capsys.readouterr().out
    assert "accum_undivided: diverged at loss" in out and "exactly 2 x the reference" in out
    assert cli_main(["bisect", "accum_undivided", "--fixed"]) == 0
    assert "accum_undivided (fixed): clean" in capsys.readouterr().out
    assert cli_main(["bisect", "tests.test_correctness:sum_vs_avg_fixed"]) == 0
    assert "sum_vs_avg (fixed): clean" in capsys.readouterr().out


def test_cli_names_an_unknown_bug(capsys):
    assert cli_main(["bisect", "no_such_bug"]) == 2
    assert "no bug named 'no_such_bug'; the zoo has: sum_vs_avg" in capsys.readouterr().err
    assert cli_main(["zoo", "no_such_bug"]) == 2
    assert cli_main(["bisect", "lab_utils.correctness.zoo.model:make_model"]) == 2
    assert "returned a TinyLM, not a lab_utils.correctness.Case" in capsys.readouterr().err
