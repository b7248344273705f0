"""calc.moe against published MoE sizes, and its memory / all-to-all arithmetic by hand."""

import dataclasses

import pytest

from lab_utils import calc
from lab_utils.calc import (
    DEEPSEEK_V3_LAYOUT,
    MOE_PRESETS,
    MOE_PUBLISHED,
    MoEConfig,
    all_to_all_bytes_per_layer,
    gqa_attention_params,
    mla_attention_params,
    model_state_memory,
    moe_memory_per_rank,
    moe_param_count,
)


@pytest.mark.parametrize("name", sorted(MOE_PUBLISHED))
def test_presets_reproduce_published_total_and_active(name):
    total, active, with_embedding = MOE_PUBLISHED[name]
    count = moe_param_count(MOE_PRESETS[name])
    # published figures are rounded: 46.7B / 12.9B to 0.1B, 671B / 37B to 1B
    digits = 1 if total < 100e9 else 0
    assert round(count.total / 1e9, digits) == round(total / 1e9, digits)
    assert round(count.active(with_embedding) / 1e9, digits) == round(active / 1e9, digits)


def test_mixtral_by_hand():
    # per layer: q, o 4096x4096; k, v 4096x1024; 8 experts x 3 x 4096 x 14336; router 8 x 4096;
    # two RMSNorms; + untied embedding and head (32000 x 4096) and the final norm
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 8 * 3 * 4096 * 14336 + 8 * 4096 + 2 * 4096
    count = moe_param_count(MOE_PRESETS["mixtral-8x7b"])
    assert count.total == 32 * layer + 2 * 32000 * 4096 + 4096 == 46_702_792_704
    assert count.active() == count.total - 32 * 6 * 3 * 4096 * 14336 == 12_879_925_248


def test_deepseek_v3_attention_is_mla_by_hand():
    mla = (
        7168 * 1536
        + 1536
        + 1536 * 128 * 192  # queries (with q_a norm)
        + 7168 * 576
        + 512
        + 512 * 128 * 256
        + 128 * 128 * 7168
    )  # keys/values, output
    assert mla_attention_params(7168, 128, 1536, 512, 128, 64, 128) == mla == 187_107_328
    assert gqa_attention_params(4096, 32, 8) == 41_943_040


def test_more_experts_grow_total_not_active():
    base = MOE_PRESETS["mixtral-8x7b"]
    counts = [moe_param_count(dataclasses.replace(base, n_experts=e)) for e in (8, 16, 64)]
    assert counts[0].total < counts[1].total < counts[2].total
    assert counts[0].active() == counts[1].active() - 32 * 8 * 4096  # only the router grows
    more_k = moe_param_count(dataclasses.replace(base, top_k=4))
    assert more_k.total == counts[0].total and more_k.active() > counts[0].active()


def test_memory_per_rank_splits_experts_over_ep_and_state_over_dp():
    cfg = MOE_PRESETS["deepseek-v3"]
    count = moe_param_count(cfg)
    m = moe_memory_per_rank(cfg, **DEEPSEEK_V3_LAYOUT)
    assert m.expert_params == count.routed_experts / (64 * 16)
    assert m.dense_params == count.non_expert / 16
    assert m.expert_bytes == model_state_memory(m.expert_params, zero_stage=1, dp=2).total
    assert m.dense_bytes == model_state_memory(m.dense_params, zero_stage=1, dp=128).total
    assert 10e9 < m.total < 12e9  # ~10.8 GB of model state per GPU at 16 B/param
    one_gpu = moe_memory_per_rank(cfg, ep=1)
    assert one_gpu.total == pytest.approx(16 * count.total)  # the whole model, 10.7 TB
    # the misconception: active parameters x 16 B is 20x less than what one replica holds
    assert one_gpu.total > 15 * 16 * count.active()


def test_all_to_all_volume_by_hand():
    v = all_to_all_bytes_per_layer(4096, 7168, 8, 64, dispatch_bytes=1, combine_bytes=2)
    rows = 4096 * 8
    assert v.dispatch == pytest.approx(63 / 64 * rows * 7168 * 1)
    assert v.combine == pytest.approx(63 / 64 * rows * 7168 * 2)
    assert v.step == 2 * v.forward == 2 * (v.dispatch + v.combine)
    assert v.inter_node_fraction == pytest.approx(56 / 63)
    padded = all_to_all_bytes_per_layer(4096, 7168, 8, 64, padded_capacity_factor=1.25)
    assert padded.dispatch == pytest.approx(
        1.25 * all_to_all_bytes_per_layer(4096, 7168, 8, 64).dispatch
    )
    assert all_to_all_bytes_per_layer(16, 8, 2, 1).forward == 0  # one rank: nothing moves
    assert all_to_all_bytes_per_layer(16, 8, 2, 4, gpus_per_node=8).inter_node_fraction == 0


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: moe_memory_per_rank(MOE_PRESETS["mixtral-8x7b"], ep=3), "divide"),
        (lambda: moe_memory_per_rank(MOE_PRESETS["mixtral-8x7b"], ep=0), "ep"),
        (lambda: all_to_all_bytes_per_layer(0, 8, 2, 2), "tokens_per_rank"),
        (lambda: all_to_all_bytes_per_layer(8, 8, 2, 2, padded_capacity_factor=-1), "padded"),
        (lambda: MoEConfig("x", 10, 8, 2, 100, n_experts=4, top_k=5, expert_ffn=8), "top_k"),
        (
            lambda: MoEConfig(
                "x", 10, 8, 2, 100, n_experts=4, top_k=1, expert_ffn=8, n_dense_layers=1
            ),
            "dense_ffn",
        ),
    ],
)
def test_bad_inputs_give_readable_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_exported_from_calc():
    for name in (
        "moe_param_count",
        "moe_memory_per_rank",
        "all_to_all_bytes_per_layer",
        "MOE_PRESETS",
        "DEEPSEEK_V3_LAYOUT",
    ):
        assert name in calc.__all__ and hasattr(calc, name)
