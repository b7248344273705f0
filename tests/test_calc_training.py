"""Time, GPU-hours and cost to train vs Narayanan et al. 2021 Sec. 5.1 and DeepSeek-V3."""

import pytest

from lab_utils.calc import DEEPSEEK_V3, NARAYANAN_SEC51, mfu_from_gpu_hours, time_to_train


@pytest.mark.parametrize("est", NARAYANAN_SEC51, ids=lambda e: e.model)
def test_narayanan_end_to_end_estimates(est):
    # Sec. 5.1: 8TP/(nX): GPT-3 175B on 300B tokens, 1024 A100s at 140 TFLOP/s: 34 days;
    # 1T (1008B in Table 1) on 450B tokens, 3072 A100s at 163 TFLOP/s: 84 days.
    t = est.estimate()
    assert round(t.days) == est.printed_days
    assert t.flops == 8 * est.n_tokens * est.n_params
    assert t.hfu == pytest.approx(est.tflops_per_gpu / 312)  # X over the A100 peak
    assert t.mfu == pytest.approx(t.hfu * 6 / 8)  # the recomputed forward
    assert t.gpu_hours == pytest.approx(t.days * 24 * est.n_gpus)


def test_gpt3_numbers_spelled_out():
    t = time_to_train(175e9, 300e9, 1024, 140e12, "full", price_per_gpu_hour=2.0)
    assert t.seconds == pytest.approx(8 * 300e9 * 175e9 / (1024 * 140e12))
    assert round(t.days, 1) == 33.9 and round(t.gpu_hours / 1e3) == 833
    assert t.cost == pytest.approx(2.0 * t.gpu_hours) and t.mfu is None


def test_mfu_path_and_recompute_only_moves_hfu():
    a = time_to_train(70e9, 2e12, 1024, mfu=0.4, peak_flops=989e12)
    b = time_to_train(70e9, 2e12, 1024, mfu=0.4, peak_flops=989e12, recompute="full")
    assert a.seconds == b.seconds == pytest.approx(6 * 2e12 * 70e9 / (1024 * 989e12 * 0.4))
    assert (a.hfu, b.hfu) == pytest.approx((0.4, 0.4 * 8 / 6))
    assert time_to_train(70e9, 2e12, 2048, mfu=0.4, peak_flops=989e12).gpu_hours == pytest.approx(
        a.gpu_hours
    )  # more GPUs: same GPU-hours


def test_deepseek_v3_budget():
    # DeepSeek-AI 2024, Table 1: 2664K + 119K + 5K = 2788K H800 GPU-hours, $5.576M at $2;
    # 180K GPU-hours per trillion tokens = 3.7 days on 2048 GPUs; 14.8T tokens.
    d = DEEPSEEK_V3
    assert d.total_gpu_hours == d.printed_total_gpu_hours
    assert d.cost == d.printed_cost
    assert d.gpu_hours_per_trillion * d.tokens / 1e12 == pytest.approx(d.pretrain_gpu_hours)
    assert round(d.days(d.gpu_hours_per_trillion), 1) == d.printed_days_per_trillion
    assert round(d.days(d.pretrain_gpu_hours), 1) == 54.2  # under two months
    # implied MFU of 37B activated parameters at the H800's bf16 dense peak
    assert round(100 * mfu_from_gpu_hours(37e9, 14.8e12, 2.664e6, 989e12), 1) == 34.6
    t = time_to_train(
        37e9,
        14.8e12,
        2048,
        mfu=mfu_from_gpu_hours(37e9, 14.8e12, 2.664e6, 989e12),
        peak_flops=989e12,
        price_per_gpu_hour=2.0,
    )
    assert t.gpu_hours == pytest.approx(2.664e6) and t.cost == pytest.approx(5.328e6)
