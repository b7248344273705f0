"""Parameter counts vs published sizes (lab 01)."""

import pytest

from lab_utils.calc import (
    NARAYANAN_TABLE1,
    PRESETS,
    ModelConfig,
    narayanan_param_count,
    param_count,
    preset,
)


@pytest.mark.parametrize("run", NARAYANAN_TABLE1, ids=lambda r: f"{r.params_b}B")
def test_narayanan_table1_param_counts(run):
    # Narayanan et al. 2021 Table 1 prints billions with one decimal; eq. (2) must round to it.
    p = narayanan_param_count(run.n_layers, run.hidden, vocab_size=51200, seq_len=2048)
    assert round(p / 1e9, 1) == run.params_b
    if run.params_b >= 7.5:
        assert p == pytest.approx(run.params_b * 1e9, rel=0.01)
    else:
        # 1.652B is printed "1.7" (2.8% off) and 3.562B "3.6" (1.1% off): paper rounding.
        assert abs(p - run.params_b * 1e9) < 0.05e9


@pytest.mark.parametrize("run", NARAYANAN_TABLE1, ids=lambda r: f"{r.params_b}B")
def test_exact_count_matches_narayanan_formula_plus_final_layernorm(run):
    exact = param_count(run.config).total
    assert exact - narayanan_param_count(run.n_layers, run.hidden) == pytest.approx(
        2 * run.hidden, abs=1e-3 * run.hidden
    )  # only the final LayerNorm (2h) differs


@pytest.mark.parametrize(
    "name, expected",
    [
        ("gpt2-small", 124_439_808),  # HF GPT-2 (tied head) parameter count
        ("gpt2-medium", 354_823_168),
        ("gpt2-large", 774_030_080),
        ("gpt2-xl", 1_557_611_200),
        ("llama2-7b", 6_738_415_616),  # Llama 2 "7B"
        ("llama2-13b", 13_015_864_320),
        ("llama2-70b", 68_976_648_192),  # GQA 8 KV heads, ffn 28672
        ("llama3-8b", 8_030_261_248),
        ("llama3-70b", 70_553_706_496),
        ("llama3.2-1b", 1_235_814_400),
    ],
)
def test_presets_exact_counts(name, expected):
    assert param_count(PRESETS[name]).total == expected


def test_gpt3_is_about_175b():
    total = param_count(PRESETS["gpt3-175b"]).total
    assert total == pytest.approx(174.6e9, rel=1e-3)  # Brown et al. 2020 report "175.0B"


def test_breakdown_llama2_7b():
    pc = param_count(PRESETS["llama2-7b"])
    assert pc.embedding == pc.head == 32000 * 4096  # untied head
    assert pc.mlp == 32 * 3 * 4096 * 11008  # SwiGLU: three matrices
    assert pc.attention == 32 * 4 * 4096 * 4096  # MHA, no biases
    assert pc.norms == 65 * 4096  # 2 RMSNorms/layer + final
    assert sum(pc.as_dict().values()) == pc.total


def test_gqa_shrinks_k_and_v_only():
    pc = param_count(PRESETS["llama2-70b"])
    assert pc.attention == 80 * (2 * 8192**2 + 2 * 8192 * 1024)


def test_tied_gpt_has_no_head_and_counts_positions():
    pc = param_count(PRESETS["gpt2-small"])
    assert pc.head == 0
    assert pc.embedding == (50257 + 1024) * 768


def test_defaults_ffn_and_kv_heads():
    cfg = ModelConfig(vocab_size=100, hidden=64, n_layers=2, n_heads=4)
    assert cfg.ffn == 256 and cfg.kv_heads == 4 and cfg.head_dim == 16


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(hidden=65, n_heads=4), "divisible by n_heads"),
        (dict(hidden=64, n_heads=4, n_kv_heads=3), "multiple of n_kv_heads"),
        (dict(hidden=64, n_heads=4, norm="batchnorm"), "norm must be one of"),
        (dict(hidden=64, n_heads=4, position="alibi"), "position must be one of"),
        (dict(hidden=0, n_heads=4), "hidden must be a whole number"),
    ],
)
def test_model_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(vocab_size=100, n_layers=2, **kwargs)


def test_preset_lookup():
    assert preset("llama2-7b") is PRESETS["llama2-7b"]
    assert preset("megatron-145.6b").hidden == 12288


def test_preset_errors():
    with pytest.raises(ValueError, match="unknown model preset 'gpt5'.*llama2-7b"):
        preset("gpt5")
    with pytest.raises(ValueError, match="n_layers must be a whole number >= 1"):
        narayanan_param_count(0, 1024)
