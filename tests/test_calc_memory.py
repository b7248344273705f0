"""Model-state memory vs the ZeRO paper and Transformer Math 101 (labs 01, 05)."""

import math

import pytest

from lab_utils.calc import (
    GB,
    RECIPES,
    Recipe,
    fmt_bytes,
    max_params_that_fit,
    model_state_memory,
    zero_memory_table,
)


def test_zero_figure1_7p5b_on_64_ranks():
    # Rajbhandari et al. 2020 Fig. 1: 120 / 31.4 / 16.6 / 1.9 GB (decimal GB).
    got = [
        model_state_memory(7.5e9, "mixed_adam", stage, dp=64).total / GB for stage in (0, 1, 2, 3)
    ]
    assert got == pytest.approx([120, 31.40625, 16.640625, 1.875])
    assert [round(g, 1) for g in got] == [120.0, 31.4, 16.6, 1.9]


# ZeRO Table 1 (per-device GB for P_os, P_os+g, P_os+g+p). The paper rounds small values and
# truncates large ones (4187.5 is printed 4187), so an entry matches if it equals the value
# rounded to its printed digits or, for integers, the truncated value.
ZERO_TABLE1 = {
    (7.5e9, 4): ("52.5", "41.3", "30"),
    (7.5e9, 16): ("35.6", "21.6", "7.5"),
    (7.5e9, 64): ("31.4", "16.6", "1.88"),
    (7.5e9, 256): ("30.4", "15.4", "0.47"),
    (7.5e9, 1024): ("30.1", "15.1", "0.12"),
    (128e9, 64): ("536", "284", "32"),
    (128e9, 1024): ("513", "257", "2"),
    (1e12, 64): ("4187", "2218", "250"),
    (1e12, 1024): ("4011", "2013", "15.6"),
}


@pytest.mark.parametrize("key", ZERO_TABLE1, ids=lambda k: f"{k[0]:.3g}-dp{k[1]}")
def test_zero_table1(key):
    n, dp = key
    got = zero_memory_table(n, dps=(dp,))[dp]
    for printed, value in zip(ZERO_TABLE1[key], got):
        gb, digits = value / GB, len(printed.partition(".")[2])
        close = abs(gb - float(printed)) <= 0.5 * 10**-digits + 1e-9
        assert close or (digits == 0 and math.floor(gb) == int(printed)), (printed, gb)


def test_transformer_math_101_numbers():
    assert RECIPES["mixed_adam"].per_param == 16  # 2 + 2 + 4 + 4 + 4
    assert model_state_memory(7e9).total == 112 * GB  # 7B does not fit an 80 GB GPU
    assert model_state_memory(3e9).total == 48 * GB
    assert fmt_bytes(model_state_memory(7e9).total) == "112.0 GB"
    assert RECIPES["fp32_adam"].per_param == 16
    assert RECIPES["fp32_sgd_momentum"].per_param == 12
    assert RECIPES["mixed_adam_8bit"].per_param == 10  # 8-bit m and v: 2 B instead of 8
    assert RECIPES["mixed_adam_fp32_grad_copy"].per_param == 20


@pytest.mark.parametrize(
    "name, fixed, sharded",
    [
        ("mixed_adam_fp32_grad_copy", 4, 16),  # Megatron: fp16 param, fp16 grads: 4 + 16/d
        ("mixed_adam_fp32_grads", 6, 12),  # bf16 param, fp32 grads: 6 + 12/d
        ("fp32_adam", 8, 8),  # fp32 param, fp32 grads: 8 + 8/d
    ],
)
def test_megatron_distributed_optimizer_table(name, fixed, sharded):
    d = 8
    assert model_state_memory(1.0, name, zero_stage=1, dp=d).total == pytest.approx(
        fixed + sharded / d
    )


def test_zero_formulas_general():
    n, k = 1e9, 16
    assert model_state_memory(n, zero_stage=1, dp=k).total == pytest.approx(4 * n + 12 * n / k)
    assert model_state_memory(n, zero_stage=2, dp=k).total == pytest.approx(2 * n + 14 * n / k)
    assert model_state_memory(n, zero_stage=3, dp=k).total == pytest.approx(16 * n / k)


def test_tp_pp_divide_params():
    m = model_state_memory(70e9, zero_stage=1, dp=8, tp=8, pp=4)
    psi = 70e9 / 32
    assert m.n_params == psi
    assert m.total == pytest.approx(4 * psi + 12 * psi / 8)


def test_offload_moves_master_and_optimizer_to_host():
    m = model_state_memory(1e9, zero_stage=1, dp=4, offload_optimizer=True)
    assert m.total == 4e9 and m.master == m.optimizer == 0
    assert m.host == 12e9 / 4


def test_breakdown_fields_sum():
    m = model_state_memory(2e9, zero_stage=2, dp=2)
    assert sum(m.as_dict().values()) == m.total == 2 * 2e9 + 14 * 2e9 / 2


def test_custom_recipe():
    adafactor_ish = Recipe("bf16_only", 2, 2, 0, 1, "illustration")
    assert model_state_memory(1e9, adafactor_ish).total == 5e9


def test_max_params_that_fit():
    assert max_params_that_fit(80 * GB) == pytest.approx(5e9)
    assert max_params_that_fit(80 * GB, zero_stage=3, dp=64) == pytest.approx(320e9)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: model_state_memory(1e9, zero_stage=4), "zero_stage must be 0, 1, 2 or 3"),
        (lambda: model_state_memory(1e9, "lion"), "recipe must be one of"),
        (lambda: model_state_memory(-1), "n_params must be a number >= 0"),
        (lambda: model_state_memory(1e9, dp=0), "dp must be a whole number >= 1"),
        (lambda: max_params_that_fit(80e9, reserved_bytes=90e9), "leaves no memory"),
        (lambda: fmt_bytes(1e9, "gigs"), "unknown unit 'gigs'"),
        (lambda: fmt_bytes(float("nan")), "cannot format NaN"),
    ],
)
def test_memory_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_lab01_recipes_amp_and_pure_bf16():
    # torch.autocast keeps fp32 parameters (fp32 grads, no master): 16 B like fp32 Adam;
    # AdamW on bf16 parameters keeps bf16 m and v and no master: 8 B (measured in lab 01).
    assert RECIPES["amp_adam"].per_param == 16 and RECIPES["amp_adam"].master == 0
    assert RECIPES["bf16_adam"].per_param == 8 and RECIPES["bf16_adam"].optimizer == 4


def test_logits_bytes():
    from lab_utils.calc import logits_bytes

    assert logits_bytes(2048, 1, 32000) == 4 * 2048 * 32000
    assert logits_bytes(2048, 2, 32000, tp=4, bytes_per_value=2) == 2 * 2048 * 2 * 32000 / 4
