"""calc.moe_planner: MoE layouts (PP x DP, EP inside DP, no TP) priced and ranked.

Pure Python, no ranks. The DeepSeek-V3 checks use the repo's preset and its published layout
(DeepSeek-AI 2024, Sec. 3.2: PP16, EP64 over 8 nodes, ZeRO-1 DP, no TP, 2048 H800 GPUs).
"""

import dataclasses

import pytest

from lab_utils import calc
from lab_utils.calc import (
    DEEPSEEK_V3_LAYOUT,
    MOE_PRESETS,
    MoEPlan,
    dgx_h100,
    evaluate_moe,
    h800_cluster,
    moe_memory_per_rank,
    plan_moe,
)

DS = MOE_PRESETS["deepseek-v3"]
MIXTRAL = MOE_PRESETS["mixtral-8x7b"]
BATCH, SEQ = 15360, 4096  # DeepSeek-V3's final batch (sequences) and pre-training length


def published(**kw) -> MoEPlan:
    """DeepSeek-V3's layout on its cluster: 16 stages of 128 GPUs, EP64 x 2 replicas."""
    args = dict(zero_stage=1, micro_batch=1, recompute="full", dispatch_bytes=1)
    return evaluate_moe(DS, h800_cluster(256), BATCH, SEQ, pp=16, dp=128, ep=64, **{**args, **kw})


def test_memory_agrees_with_moe_memory_per_rank():
    plan = published()
    layout = DEEPSEEK_V3_LAYOUT  # dp there counts an expert's replicas: 128 / 64 = 2
    reference = moe_memory_per_rank(
        DS, layout["ep"], layout["dp"], layout["pp"], layout["zero_stage"]
    )
    assert plan.expert_replicas == layout["dp"] == 2
    assert plan.model_state == reference
    assert plan.memory_bytes == pytest.approx(reference.total + plan.activation_bytes)
    small = evaluate_moe(MIXTRAL, dgx_h100(2), 32, 4096, pp=2, dp=8, ep=4, zero_stage=0)
    assert small.model_state == moe_memory_per_rank(MIXTRAL, ep=4, dp=2, pp=2, zero_stage=0)


def test_deepseek_v3_published_layout_is_feasible_and_fits():
    cluster = h800_cluster(256)
    assert cluster.world == 2048 and cluster.gpu_mem_bytes == 80e9  # H800 is in DEVICES
    plan = published()
    assert plan.feasible, plan.explain()
    assert plan.memory_bytes < cluster.gpu_mem_bytes
    assert plan.n_micro == BATCH // 128 and plan.layout == (16, 128, 64)
    # EP64 spans 8 nodes: 56 of each GPU's 63 peers are elsewhere, and the planner says so
    assert any("spans 8 nodes" in w for w in plan.warnings)
    # without recomputation our 16-bit activation estimate (16 micro-batches in flight on
    # stage 0) does not fit: DeepSeek-V3 caches FP8 activations and recomputes some ops
    assert not published(recompute="selective").feasible
    plans = plan_moe(
        DS,
        cluster,
        BATCH,
        SEQ,
        micro_batches=(1,),
        zero_stages=(1,),
        recomputes=("full",),
        dispatch_bytes=1,
    )
    assert any(p.layout == (16, 128, 64) and p.feasible for p in plans)
    ok = [p for p in plans if p.feasible]
    assert ok == plans[: len(ok)] and [p.step_s for p in ok] == sorted(p.step_s for p in ok)


def test_more_experts_same_compute_more_memory():
    cluster = dgx_h100(2)
    base = evaluate_moe(MIXTRAL, cluster, 32, 4096, pp=2, dp=8, ep=8)
    wider = evaluate_moe(
        dataclasses.replace(MIXTRAL, n_experts=64), cluster, 32, 4096, pp=2, dp=8, ep=8
    )
    # top-2 of 8 or of 64 experts: the same FLOPs per token (only the router, E x h per
    # layer, grows: 1.8M more of 12.9B active parameters)
    assert wider.compute_s == pytest.approx(base.compute_s, rel=1e-3)
    assert wider.model_state.total > 4 * base.model_state.total
    assert wider.memory_bytes > base.memory_bytes


def test_ep_across_nodes_is_slower_in_all_to_all():
    cluster = dgx_h100(4)  # 32 GPUs, 8 per node
    inside = evaluate_moe(DS, cluster, 64, 4096, pp=1, dp=32, ep=8)
    across = evaluate_moe(DS, cluster, 64, 4096, pp=1, dp=32, ep=32)
    assert inside.a2a_per_layer.inter_node_fraction == 0
    assert across.a2a_per_layer.inter_node_fraction == pytest.approx(24 / 31)
    # a rank even SENDS a little more in the larger group ((ep-1)/ep), but the time gap is
    # the link: NVLink 450 GB/s vs 50 GB/s per GPU to other nodes
    assert across.a2a_per_layer.dispatch / inside.a2a_per_layer.dispatch < 1.2
    assert across.a2a_s > 5 * inside.a2a_s
    assert not any("spans" in w for w in inside.warnings)


def test_indivisible_ep_is_a_clear_problem():
    plan = evaluate_moe(DS, h800_cluster(256), BATCH, SEQ, pp=16, dp=128, ep=48)
    assert not plan.feasible and plan.model_state is None
    assert any("EP=48 does not divide the 256 routed experts" in p for p in plan.problems)
    assert any("EP=48 does not divide DP=128" in p for p in plan.problems)
    assert "NOT FEASIBLE" in plan.explain()
    # ep divides the experts but not dp: still refused, with the reason
    odd = evaluate_moe(MIXTRAL, dgx_h100(2), 24, 4096, pp=4, dp=4, ep=8)
    assert odd.problems == (
        "EP=8 does not divide DP=4: the experts are split over ep ranks "
        "INSIDE the data-parallel group, so ep must divide dp",
    )


def test_plan_enumerates_only_valid_layouts_and_ranks_them():
    plans = plan_moe(MIXTRAL, dgx_h100(2), 32, 4096)
    assert plans and all(p.pp * p.dp == 16 and p.dp % p.ep == 0 and 8 % p.ep == 0 for p in plans)
    top = plan_moe(MIXTRAL, dgx_h100(2), 32, 4096, n_best=3)
    assert top == plans[:3]
    hidden = plan_moe(MIXTRAL, dgx_h100(2), 32, 4096, a2a_overlap=1.0, n_best=1)[0]
    assert hidden.step_s <= plans[0].step_s


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: evaluate_moe(DS, h800_cluster(1), 8, 128, pp=1, dp=8, ep=8, zero_stage=2),
            "zero_stage",
        ),
        (
            lambda: evaluate_moe(DS, h800_cluster(1), 8, 128, pp=1, dp=8, ep=8, a2a_overlap=1.5),
            "a2a_overlap",
        ),
        (lambda: plan_moe(MIXTRAL, dgx_h100(1), 7, 128, micro_batches=(2,)), "no layout"),
        (
            lambda: plan_moe(calc.PRESETS["gpt2-small"], dgx_h100(1), 8, 128),
            "cfg must be a MoEConfig",
        ),
    ],
)
def test_bad_inputs_give_readable_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_exported_from_calc():
    for name in ("plan_moe", "evaluate_moe", "MoEPlan", "h800_cluster"):
        assert name in calc.__all__ and hasattr(calc, name)
