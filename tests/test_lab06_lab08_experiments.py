"""Labs 06 and 08 experiments and planning helpers (experiments.lab06, lab08.plans, the diagrams).

One 4-rank launch checks lab 06's byte accounting: without sequence parallelism the ledger equals
the papers' formula; with it, ledger - formula is exactly the SP extras (re-gathers, boundary
gathers, LayerNorm-grad sync); the wire adds gloo's reduce-scatter excess and 48-byte headers
only. The rest is pure calculation: the source claims lab 08 confronts, the published layouts,
the 512-GPU candidates, the GQA warning, the figures.
"""

import pytest

from lab_utils import calc, run
from lab_utils.experiments import lab06
from lab_utils.experiments.lab08 import plans as lab08_plans
from lab_utils.models import GPTConfig
from lab_utils.topology import Topology

CFG_COMM = GPTConfig(vocab_size=64, seq_len=32, n_layer=2, n_head=4, d_model=64)
CFG_MEM = GPTConfig(vocab_size=64, seq_len=16, n_layer=1, n_head=4, d_model=32, dropout=0.1)
CFG_VOCAB = GPTConfig(vocab_size=256, seq_len=16, n_layer=2, n_head=4, d_model=32)


def lab06_worker(ctx):
    return lab06.step_comm(ctx, CFG_COMM, 8), lab06.activation_bytes(ctx, CFG_MEM, 4)


def vocab_worker(ctx):
    return lab06.vocab_parallel(ctx, CFG_VOCAB, 4)


@pytest.fixture(scope="module")
def lab06_results():
    return run(lab06_worker, 4, timeout_s=240, quiet=True)


def test_step_comm_ledger_formula_wire(lab06_results):
    for comm, _ in lab06_results:
        rows = lab06.comm_rows(comm, 8, CFG_COMM)
        assert len(rows) == 2 * (2 + 3)  # t = 2, 4; no SP: fwd, bwd; SP: + grad sync
        for row in rows:
            assert row["ledger - formula"] == row["SP extras"], row
            if row["wire"] is not None:
                headers = row["wire - ledger"] - row["gloo RS excess"]
                assert headers >= 0 and headers % 48 == 0, row
        for r in comm:
            if not r.sp:
                assert r.calls["forward"]["all_reduce"] == r.calls["backward"]["all_reduce"] == 4
            else:  # 2 re-gathers per layer in backward + the gather before the first block
                assert r.calls["backward"]["all_gather"] == 4 * CFG_COMM.n_layer + 1


def test_sp_formula_is_the_same_volume_per_collective():
    for t in (2, 4, 8):
        assert lab06.comm_formula(t, True, 8, CFG_COMM) == lab06.comm_formula(t, False, 8, CFG_COMM)


def test_activation_bytes_equal_formula_plus_extras(lab06_results):
    for _, mem in lab06_results:
        assert {(m.t, m.sp) for m in mem} == {(t, sp) for t in (1, 2, 4) for sp in (False, True)}
        for m in mem:
            assert m.measured == m.formula + m.extras, m


def test_vocab_parallel_loss_and_comm():
    res = run(vocab_worker, 2, timeout_s=120, quiet=True)
    for gathered, split in res:
        assert max(gathered.loss_err, split.loss_err, gathered.grad_err, split.grad_err) < 1e-5
        assert (
            gathered.calls["forward"]["all_gather"] == 1
            and split.calls["forward"]["all_gather"] == 0
        )
        assert split.calls["forward"]["all_reduce"] == gathered.calls["forward"]["all_reduce"] + 3
        assert 2 * split.logits_bytes == gathered.logits_bytes


def test_source_claims_are_confronted_with_calc():
    claims = {c.claim: c for c in lab08_plans.source_claims()}
    c44 = claims["175B, TP=8: 350 GB / 8 = 44 GB per GPU, fits"]
    assert c44.calculator == pytest.approx(
        calc.model_state_memory(174.6e9 / 8).total / 1e9, rel=1e-3
    )
    assert claims["  ... DP = 1000 / (8 x 16) = 7"].calculator == 104
    assert claims["70B, TP=8 PP=4 DP=8: ~4.4 GB of state per GPU"].calculator == pytest.approx(35.0)
    assert claims["  ... that layout with GPT-3's batch"].calculator == pytest.approx(700 / 24)
    assert claims["512 GPUs: start at DP=64 PP=8 TP=1 (70B)"].calculator > 1.5
    # 1536 sequences: no layout of 1000 A100s divides the batch
    with pytest.raises(ValueError, match="no layout divides"):
        calc.plan(calc.PRESETS["gpt3-175b"], calc.dgx_a100(125), 1536, 2048)


def test_published_layouts_fit_and_reproduce_mfu():
    rows = lab08_plans.published_layouts()
    assert len(rows) == len(calc.LLAMA3_405B_TABLE4) + 1
    for row, run_ in zip(rows, calc.LLAMA3_405B_TABLE4):
        assert row["total/GPU (GB)"] < 80 and abs(run_.implied_mfu * 100 - run_.mfu_pct) < 1
    assert rows[-1]["model state/GPU (GB)"] < 80


def test_512_candidates_and_gqa_warning():
    l70 = calc.PRESETS["llama2-70b"]
    rows = lab08_plans.candidates(
        l70, calc.dgx_a100(64), 1024, 4096, [(64, 1, 8), (64, 2, 4), (16, 8, 4), (128, 4, 1)]
    )
    best = min((r for r in rows if "step (s)" in r), key=lambda r: r["step (s)"])
    assert best["layout"] == "DP=16 TP=8 PP=4" and rows[0]["vs planner's best"] > 1.5
    sweep = lab08_plans.tp_pp_sweep(l70, calc.dgx_a100(32), 1024, 4096, 8, ((16, 2), (8, 4)))
    assert any("key/value heads" in w for w in sweep[0].strict.warnings)
    assert "warning" in lab08_plans.sweep_rows(sweep)[0]["verdict"]


def test_3d_formula_counts():
    f = lab08_plans.formula_3d(layers=2, param_bytes=1000, m=4, b=2, s=16, h=32, d=2, t=2)
    assert f["tp"][0] == 32 and f["pp"][0] == 8 and f["dp"][0] == 1
    assert f["tp"][1] / f["pp"][1] == 8  # 4 L_s all-reduces (t=2 sends 1 x D) vs 1 activation


def test_diagrams_build():
    from lab_utils.viz.parallel_diagrams import megatron_block_figure, mesh_figure

    fig = megatron_block_figure()
    texts = " ".join(a.text for a in fig.layout.annotations)
    for word in ("f", "g", "all-gather", "reduce-scatter", "column-par.", "row-par."):
        assert word in texts
    topo = Topology(dp=2, tp=2, pp=2)
    fig = mesh_figure(topo, gpus_per_node=4)
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert all(f"rank {r}" in texts for r in range(topo.world_size))


def test_mesh_groups_dry_run_logic():
    from lab_utils.exercises.mesh_groups import _collective_problem, axis_groups

    same = [[((0, 1), False), ((2, 3), False)]] * 2
    assert _collective_problem(same) is None
    members_only = [[((0, 1), False)], [((2, 3), False)]]
    assert "COLLECTIVE" in _collective_problem(members_only)
    local = [[((0, 1), True)], [((2, 3), True)]]
    assert _collective_problem(local) is None
    for dp, tp, pp in ((2, 2, 2), (2, 4, 1), (1, 2, 4)):
        topo = Topology(dp=dp, tp=tp, pp=pp)
        for axis in ("tp", "dp", "pp"):
            assert sorted(axis_groups(axis, dp, tp, pp)) == sorted(topo.all_groups(axis))
