"""Published layouts reproduced: Llama 3 405B (Meta 2024, Table 4) and DeepSeek-V3 (2024)."""

import pytest

from lab_utils.calc import (
    DEEPSEEK_V3_RECIPE,
    GB,
    LLAMA3_405B_TABLE4,
    PRESETS,
    deepseek_v3_params,
    deepseek_v3_stage_memory,
    layout_memory,
    model_state_memory,
    param_count,
)


@pytest.mark.parametrize("run", LLAMA3_405B_TABLE4, ids=lambda r: f"{r.gpus}gpus-cp{r.cp}")
def test_llama3_table4_rows_are_consistent(run):
    # GPUs = TP x CP x PP x DP; tokens per batch = seq x batch per DP x DP = "16M".
    assert run.tp * run.cp * run.pp * run.dp == run.gpus
    assert round(run.tokens_per_batch / 2**20) == 16
    # Printed MFU vs TFLOP/s / 989: the TFLOP/s column is rounded to 10, so the printed MFU
    # must lie in the interval it allows; rows 1 and 3 also round to it directly
    # (43.5% -> 43, 38.4% -> 38); row 2's 400 TFLOP/s gives 40.4%, printed 41 (needs >= 400.5).
    lo, hi = ((run.tflops_per_gpu - 5) / 989, (run.tflops_per_gpu + 5) / 989)
    assert lo * 100 - 0.5 <= run.mfu_pct <= hi * 100 + 0.5
    if run.gpus == 8192 or run.cp == 16:
        assert round(100 * run.implied_mfu) == run.mfu_pct


def test_llama3_405b_implied_throughput_and_time():
    cfg = PRESETS["llama3.1-405b"]
    assert param_count(cfg).total == 405_853_388_800
    row = LLAMA3_405B_TABLE4[1]  # 16,384 GPUs at 400 TFLOP/s
    assert round(row.tokens_per_s_per_gpu()) == 152  # tokens/s per GPU implied
    assert round(row.days_for(15.6e12)) == 73  # 15.6T tokens, no failures


def test_llama3_405b_memory_per_gpu():
    # First stage of TP8 x PP16: 7 layers + the embedding split 8 ways = 3.08B parameters;
    # ZeRO-2 over DP (x CP) keeps 2 B/param of weights whole; FlashAttention + selective
    # recomputation + SP leave 34/8 s b h per layer; 1F1B holds 16 micro-batches.
    for run in LLAMA3_405B_TABLE4:
        mem = run.memory()
        assert mem.total < 80e9  # fits an 80 GB H100
    first = LLAMA3_405B_TABLE4[1].memory()
    pc = param_count(PRESETS["llama3.1-405b"])
    psi = (7 * pc.per_layer + pc.embedding) / 8
    assert first.model_state.total == pytest.approx(2 * psi + 14 * psi / 128)
    assert first.activations == pytest.approx(34 / 8 * 8192 * 16384 * 7 * 16)
    assert round(first.total / GB, 1) == 70.3
    # the long-context row: 131072 tokens over CP=16 = 8192 per rank, the same activations
    assert LLAMA3_405B_TABLE4[2].memory().activations == first.activations


def test_deepseek_v3_parameter_count():
    # "671B total parameters, 37B activated for each token" (DeepSeek-AI 2024, abstract).
    p = deepseek_v3_params()
    assert round(p.total / 1e9) == 671
    assert round(p.activated / 1e9) == 37  # without the input embedding
    assert p.expert == 3 * 7168 * 2048 and p.attention_per_layer == 187_107_328


def test_deepseek_v3_memory_per_gpu():
    # PP16 x EP64 x ZeRO-1 DP128 on 2048 GPUs, no TP; 14 B/param (fp32 master + grads,
    # bf16 weights and moments). The first stage (embedding + 3 dense layers) is fullest.
    per_stage = [sum(deepseek_v3_stage_memory(s)) for s in range(16)]
    assert max(per_stage) == per_stage[0]
    assert round(per_stage[0] / GB, 1) == 19.4 and round(per_stage[1] / GB, 1) == 12.7
    assert DEEPSEEK_V3_RECIPE.per_param == 14
    p = deepseek_v3_params()
    non_expert, expert = deepseek_v3_stage_memory(1)  # 4 MoE layers, 16 experts each
    dense = 4 * (p.attention_per_layer + p.norms_per_layer + p.expert + p.router)
    assert non_expert == pytest.approx(model_state_memory(dense, DEEPSEEK_V3_RECIPE, 1, 128).total)
    assert expert == pytest.approx((6 + 8 / 2) * 4 * 4 * p.expert)


def test_layout_memory_checks_grouped_query_attention():
    with pytest.raises(ValueError, match="n_kv_heads"):
        layout_memory(PRESETS["llama3.1-405b"], 16, 16, 64, 8192)  # 8 K/V heads, TP=16
