"""3D planner: worked examples of the syllabus and config checking (labs 08, 12)."""

import pytest

from lab_utils.calc import (
    PRESETS,
    best_per_layout,
    check_config,
    dgx_a100,
    dgx_h100,
    evaluate,
    model_state_memory,
    param_count,
    plan,
)

LLAMA70 = PRESETS["llama2-70b"]
H100x32 = dgx_h100(32)  # 256 GPUs, 8 per node, 80 GB


@pytest.fixture(scope="module")
def plans_70b():
    return plan(LLAMA70, H100x32, global_batch=1024, seq_len=4096)


def test_70b_on_256_gpus_tp8_pp4_dp8_is_a_top_choice(plans_70b):
    best = plans_70b[0]
    assert best.feasible and best.tp <= 8 and best.pp > 1  # TP in a node, PP across
    cfg = check_config(LLAMA70, H100x32, 1024, 4096, dp=8, tp=8, pp=4, zero_stage=1)
    assert cfg.feasible and cfg.memory_bytes < 80e9
    assert cfg.step_s <= 1.10 * best.step_s  # within 10% of the best
    layouts = [p.layout for p in best_per_layout(plans_70b)]
    assert (8, 8, 4) in layouts[:12]


def test_70b_memory_breakdown_by_hand():
    cfg = check_config(LLAMA70, H100x32, 1024, 4096, dp=8, tp=8, pp=4, zero_stage=1)
    pc = param_count(LLAMA70)
    first_stage = (20 * pc.per_layer + pc.embedding) / 8  # 20 layers + embedding, TP=8
    assert cfg.model_state.total == pytest.approx(
        model_state_memory(first_stage, zero_stage=1, dp=8).total
    )
    assert cfg.model_state.total == pytest.approx(11.95e9, rel=0.01)
    assert cfg.n_micro == 128 and cfg.bubble == pytest.approx(3 / 128)


def test_70b_plain_ddp_does_not_fit():
    ddp = check_config(LLAMA70, H100x32, 1024, 4096, dp=256, tp=1, pp=1, zero_stage=0)
    assert not ddp.feasible
    assert any(p.startswith("needs 1") and p.endswith("GB > 80.0 GB per GPU") for p in ddp.problems)
    assert ddp.model_state.total == pytest.approx(16 * param_count(LLAMA70).total)


def test_tp_across_nodes_is_flagged_and_slow():
    bad = check_config(LLAMA70, H100x32, 1024, 4096, dp=8, tp=16, pp=2)
    assert not bad.feasible
    assert any("TP=16 spans 2 nodes" in p for p in bad.problems)
    ok = check_config(LLAMA70, H100x32, 1024, 4096, dp=8, tp=16, pp=2, allow_tp_across_nodes=True)
    assert ok.feasible and any("spans 2 nodes" in w for w in ok.warnings)
    tp8 = check_config(LLAMA70, H100x32, 1024, 4096, dp=8, tp=8, pp=4)
    assert ok.tp_comm_s > 5 * tp8.tp_comm_s  # 50 GB/s IB vs 450 GB/s NVLink


def test_gpt3_on_1024_a100():
    plans = plan(PRESETS["gpt3-175b"], dgx_a100(128), global_batch=1536, seq_len=2048)
    best = plans[0]
    assert best.tp == 8 and best.pp >= 4  # Narayanan: t=8 for big models
    ref = check_config(PRESETS["gpt3-175b"], dgx_a100(128), 1536, 2048, dp=16, tp=8, pp=8)
    assert ref.feasible and ref.step_s <= 1.05 * best.step_s
    assert 0.3 < ref.mfu < 0.5  # Narayanan report 44-52%


def test_small_model_prefers_plain_data_parallel():
    best = plan(PRESETS["1b"], dgx_h100(1), global_batch=64, seq_len=2048)[0]
    assert best.layout == (8, 1, 1)


def test_ranking_and_top_k(plans_70b):
    feas = [p for p in plans_70b if p.feasible]
    assert [p.step_s for p in feas] == sorted(p.step_s for p in feas)
    assert all(p.feasible for p in plans_70b[: len(feas)])
    assert not any(p.feasible for p in plans_70b[len(feas) :])
    assert len(plan(LLAMA70, H100x32, 1024, 4096, top_k=5)) == 5


def test_check_config_explains_every_problem():
    c = check_config(LLAMA70, H100x32, 1001, 4096, dp=8, tp=3, pp=3)
    text = " | ".join(c.problems)
    assert "dp*tp*pp = 8*3*3 = 72 but the cluster has 256 GPUs" in text
    assert "TP=3 does not divide n_heads=64" in text
    assert "PP=3 does not divide n_layers=80" in text
    assert "global batch 1001 is not divisible by dp*micro_batch = 8" in text
    assert "NOT FEASIBLE" in c.explain() and "problem: TP=3" in c.explain()


def test_sharded_gradients_sync_every_microbatch():
    # ZeRO-1: one reduce-scatter + all-gather per step (= one all-reduce, like DDP).
    # ZeRO-3: reduce-scatter + 2 all-gathers per micro-batch = 1.5x DDP, m times.
    z1 = check_config(LLAMA70, H100x32, 1024, 4096, dp=32, tp=8, pp=1, zero_stage=1)
    z3 = check_config(LLAMA70, H100x32, 1024, 4096, dp=32, tp=8, pp=1, zero_stage=3)
    assert z1.n_micro == z3.n_micro == 32
    assert z3.dp_comm_s == pytest.approx(1.5 * 32 * z1.dp_comm_s)
    assert z3.memory_bytes < z1.memory_bytes


def test_warnings_for_few_microbatches_and_zero2_with_pp():
    c = check_config(LLAMA70, H100x32, 16, 4096, dp=8, tp=8, pp=4, zero_stage=2)
    assert any("only 2 micro-batches for 4 stages" in w for w in c.warnings)
    assert any("ZeRO-2/3 with PP" in w for w in c.warnings)
    assert c.bubble == pytest.approx(3 / 2)


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: check_config(LLAMA70, H100x32, 1024, 4096, 8, 8, 4, zero_stage=5),
            "zero_stage must be 0, 1, 2 or 3",
        ),
        (
            lambda: check_config(LLAMA70, H100x32, 1024, 4096, 8, 8, 4, recompute="some"),
            "recompute must be one of",
        ),
        (lambda: check_config(LLAMA70, H100x32, 0, 4096, 8, 8, 4), "global_batch must be"),
        (lambda: plan(LLAMA70, dgx_h100(1), 7, 4096, micro_batches=(2,)), "no layout divides"),
        (lambda: plan(LLAMA70, dgx_h100(1), 8, 4096, micro_batches=(0,)), "each micro batch"),
    ],
)
def test_planner_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "model, cluster, batch, seq, kwargs",
    [
        ("llama2-7b", dgx_a100(2), 128, 4096, {}),
        ("llama2-70b", H100x32, 16, 4096, {"allow_tp_across_nodes": True}),  # bubble warnings
        (
            "1b",
            dgx_h100(1),
            24,
            2048,
            {
                "recipe": "fp32_sgd_momentum",
                "zero_stages": (3, 1),
                "micro_batches": [8, 1, 1],
                "compute_efficiency": 1,
            },
        ),
        ("gpt2-small", dgx_a100(3), 48, 1024, {"recomputes": ("full", "none"), "top_k": 9}),
    ],
)
def test_plan_matches_evaluate_exactly(model, cluster, batch, seq, kwargs):
    # plan() shares work across candidates (calc._layout_cost); it must return exactly what
    # evaluating every candidate with evaluate() and sorting gives: same plans, same order,
    # bit-identical numbers, same problems and warnings.
    cfg = PRESETS[model]
    opts = {
        "micro_batches": (1, 2, 4, 8),
        "recomputes": ("none", "selective", "full"),
        "zero_stages": (0, 1, 2, 3),
        "recipe": "mixed_adam",
        "allow_tp_across_nodes": False,
        "compute_efficiency": 0.5,
    }
    opts.update({k: v for k, v in kwargs.items() if k != "top_k"})
    ref = [
        evaluate(
            cfg,
            cluster,
            batch,
            seq,
            dp,
            tp,
            pp,
            zero,
            mb,
            rc,
            opts["recipe"],
            True,
            opts["allow_tp_across_nodes"],
            opts["compute_efficiency"],
        )
        for dp, tp, pp in _layouts(cfg, cluster.world)
        for zero in opts["zero_stages"]
        if dp > 1 or zero == 0
        for mb in opts["micro_batches"]
        if batch % (dp * mb) == 0
        for rc in opts["recomputes"]
    ]
    ref.sort(key=lambda pl: (not pl.feasible, pl.step_s if pl.feasible else pl.memory_bytes))
    ref = ref[: kwargs["top_k"]] if "top_k" in kwargs else ref
    for _ in range(2):  # the second call answers from the cached per-layout tables
        got = plan(cfg, cluster, batch, seq, **kwargs)
        assert [type(p) for p in got] == [type(p) for p in ref]
        assert [vars(p) for p in got] == [vars(p) for p in ref]
        assert [repr(p) for p in got] == [repr(p) for p in ref]


def _layouts(cfg, world):
    """(dp, tp, pp) in plan's order: tp | heads, pp | layers, dp * tp * pp = world."""
    return [
        (world // (tp * pp), tp, pp)
        for tp in range(1, world + 1)
        if world % tp == 0 and cfg.n_heads % tp == 0
        for pp in range(1, world // tp + 1)
        if (world // tp) % pp == 0 and cfg.n_layers % pp == 0
    ]


def test_plan_unusual_options_fail_like_evaluate():
    with pytest.raises(ValueError, match="zero_stage must be 0, 1, 2 or 3"):
        plan(LLAMA70, H100x32, 1024, 4096, zero_stages=(1, 5))
    with pytest.raises(ValueError, match="recompute must be one of"):
        plan(LLAMA70, H100x32, 1024, 4096, recomputes=("none", "some"))
    with pytest.raises(ValueError, match="recipe must be one of"):
        plan(LLAMA70, H100x32, 1024, 4096, recipe="adam")
    with pytest.raises(ValueError, match="compute_efficiency must be"):
        plan(LLAMA70, H100x32, 1024, 4096, compute_efficiency=0)
