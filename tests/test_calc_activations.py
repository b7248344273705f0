"""Activation memory vs Korthikanti et al. 2022 Table 2 at GPT-3 175B sizes (labs 01, 06, 07)."""

import pytest

from lab_utils.calc import (
    GB,
    GiB,
    activation_bytes_per_layer,
    activation_memory,
    fmt_bytes,
    in_flight_microbatches,
    schedule,
)

S, H, A, L, T, B = 2048, 12288, 96, 96, 8, 1
SBH = S * B * H  # 25,165,824


@pytest.mark.parametrize(
    "tp, sp, rc, expected",
    [
        (1, False, "none", SBH * (34 + 5 * A * S / H)),  # no parallelism: 114 sbh
        (T, False, "none", SBH * (10 + 24 / T + 5 * A * S / (H * T))),  # TP: 23 sbh
        (T, True, "none", SBH / T * (34 + 5 * A * S / H)),  # TP + SP: 14.25 sbh
        (T, False, "selective", SBH * (10 + 24 / T)),  # TP + selective: 13 sbh
        (T, True, "selective", SBH * 34 / T),  # TP + SP + selective: 4.25 sbh
        (1, False, "full", 2 * SBH),  # full recompute: 2 sbh
    ],
)
def test_korthikanti_table2_gpt3(tp, sp, rc, expected):
    assert activation_bytes_per_layer(S, B, H, A, tp, sp, rc) == pytest.approx(expected)


def test_gpt3_absolute_bytes():
    # The same numbers spelled out, so a typo in a constant cannot hide behind the formula.
    assert activation_bytes_per_layer(S, B, H, A) == 2_868_903_936
    assert activation_bytes_per_layer(S, B, H, A, T) == 578_813_952
    assert activation_bytes_per_layer(S, B, H, A, T, True) == 358_612_992
    assert activation_bytes_per_layer(S, B, H, A, T, True, "selective") == 106_954_752


def test_attention_scores_are_70_percent_at_gpt3():
    # 5as/h = 80 for GPT-3: 80/114 = 70% of the layer's activations are attention scores,
    # which selective recomputation drops (Korthikanti et al. 2022, selective recomputation).
    full = activation_bytes_per_layer(S, B, H, A)
    sel = activation_bytes_per_layer(S, B, H, A, recompute="selective")
    assert 1 - sel / full == pytest.approx(80 / 114)


def test_tp_without_sp_leaves_10sbh_replicated():
    # TP must divide the heads (issue 21), so the large-t limit uses 1024 heads of 12 dims.
    big_t = activation_bytes_per_layer(S, B, H, 1024, tp=1024, recompute="selective")
    assert big_t == pytest.approx(SBH * (10 + 24 / 1024))
    sp = activation_bytes_per_layer(
        S, B, H, 1024, tp=1024, sequence_parallel=True, recompute="selective"
    )
    assert sp == pytest.approx(SBH * 34 / 1024)


def test_first_stage_1f1b_holds_all_layers_worth():
    # p micro-batches of L/p layers = L layers of one micro-batch, whatever p is.
    per_layer = activation_bytes_per_layer(S, B, H, A, T, True, "selective")
    for p in (1, 2, 4, 8, 16):
        am = activation_memory(
            S, B, H, A, L, tp=T, pp=p, n_micro=64, sequence_parallel=True, recompute="selective"
        )
        assert am.in_flight == p
        assert am.total == pytest.approx(L * per_layer)
    last = activation_memory(
        S,
        B,
        H,
        A,
        L,
        tp=T,
        pp=8,
        n_micro=64,
        sequence_parallel=True,
        recompute="selective",
        stage=7,
    )
    assert last.total == pytest.approx(L / 8 * per_layer)
    # 96 layers x 106.95 MB = 10.27 GB = 9.56 GiB: say which unit you print.
    assert fmt_bytes(L * per_layer, "GB", 2) == "10.27 GB"
    assert fmt_bytes(L * per_layer, "GiB", 2) == "9.56 GiB"
    assert GiB / GB == pytest.approx(1.073741824)


def test_gpipe_holds_m_microbatches():
    am = activation_memory(S, B, H, A, L, tp=T, pp=8, n_micro=64, schedule="gpipe")
    assert am.in_flight == 64
    assert in_flight_microbatches("1f1b", 8, 3, 0) == 3  # fewer micro-batches than stages


@pytest.mark.parametrize("p, m, v", [(4, 8, 2), (4, 8, 4), (8, 16, 2)])
def test_interleaved_factor_matches_simulated_peak(p, m, v):
    # Korthikanti Sec. 4: interleaving multiplies first-stage memory by 1 + (p-1)/(p v).
    # The simulated schedule's peak (in chunks of 1/v of a stage) agrees exactly.
    am = activation_memory(S, B, H, A, L, pp=p, n_micro=m, virtual_stages=v)
    peak_chunks = schedule("interleaved", p, m, v).peak_in_flight[0]
    assert am.in_flight * am.interleave_factor == pytest.approx(peak_chunks / v)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: activation_bytes_per_layer(S, B, H, A, recompute="some"), "recompute must be"),
        (lambda: activation_bytes_per_layer(0, B, H, A), "seq_len must be a whole number"),
        (lambda: activation_memory(S, B, H, A, 10, pp=4), "pp=4 must divide n_layers=10"),
        (lambda: in_flight_microbatches("1f1b", 4, 8, stage=4), r"stage must be in 0\.\.3"),
        (lambda: in_flight_microbatches("pipedream", 4, 8), "schedule must be one of"),
    ],
)
def test_activation_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- the Ultra-Scale Playbook's per-model totals: the embedding convention (issue 21) -------
# Hugging Face, "The Ultra-Scale Playbook" (2025), figure "Memory Usage with Recomputation"
# (src/fragments/memory-recomputation.html): activation memory of Llama 3.x 1B/3B/8B/70B/405B
# at micro-batch 1 for sequences of 1024..8192 tokens, no / selective / full recomputation.
# The bars' data (labelled GB, in fact GiB = 2**30 bytes) equal Korthikanti's per-layer
# formula times L PLUS the embedding's s*b*h bytes: our embedding=True convention.
PLAYBOOK_SEQ = (1024, 2048, 4096, 8192)
PLAYBOOK_GIB = {
    "none": {
        "llama3.2-1b": (3.564453125, 12.12890625, 44.2578125, 168.515625),
        "llama3.2-3b": (6.0732421875, 18.708984375, 63.66796875, 232.3359375),
        "llama3-8b": (9.25390625, 28.5078125, 97.015625, 354.03125),
        "llama3-70b": (46.2578125, 142.515625, 485.03125, 1770.0625),
        "llama3.1-405b": (145.703125, 448.90625, 1527.8125, 5575.625),
    },
    "selective": {
        "llama3.2-1b": (1.064453125, 2.12890625, 4.2578125, 8.515625),
        "llama3.2-3b": (2.7919921875, 5.583984375, 11.16796875, 22.3359375),
        "llama3-8b": (4.25390625, 8.5078125, 17.015625, 34.03125),
        "llama3-70b": (21.2578125, 42.515625, 85.03125, 170.0625),
        "llama3.1-405b": (66.953125, 133.90625, 267.8125, 535.625),
    },
    "full": {
        "llama3.2-1b": (0.064453125, 0.12890625, 0.2578125, 0.515625),
        "llama3.2-3b": (0.1669921875, 0.333984375, 0.66796875, 1.3359375),
        "llama3-8b": (0.25390625, 0.5078125, 1.015625, 2.03125),
        "llama3-70b": (1.2578125, 2.515625, 5.03125, 10.0625),
        "llama3.1-405b": (3.953125, 7.90625, 15.8125, 31.625),
    },
}


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize(
    "model", ["llama3.2-1b", "llama3.2-3b", "llama3-8b", "llama3-70b", "llama3.1-405b"]
)
def test_ultrascale_playbook_activation_totals(model, recompute):
    from lab_utils.calc import PRESETS

    cfg = PRESETS[model]
    for s, printed in zip(PLAYBOOK_SEQ, PLAYBOOK_GIB[recompute][model]):
        am = activation_memory(
            s, 1, cfg.hidden, cfg.n_heads, cfg.n_layers, recompute=recompute, embedding=True
        )
        assert am.total / GiB == printed  # the figure's data, bit for bit
        assert f"{am.total / GiB:.1f}" == f"{printed:.1f}"  # its hover text (%{y:.1f})
        without = activation_memory(
            s, 1, cfg.hidden, cfg.n_heads, cfg.n_layers, recompute=recompute
        )
        assert am.total - without.total == s * cfg.hidden  # the embedding: s b h bytes


def test_embedding_term_follows_korthikanti_section_4_3():
    # First stage of 1F1B holds p micro-batches: s b h p / t with sequence parallelism.
    am = activation_memory(
        S,
        B,
        H,
        A,
        L,
        tp=T,
        pp=8,
        n_micro=64,
        sequence_parallel=True,
        recompute="selective",
        embedding=True,
    )
    assert am.embedding == SBH * 8 / T
    assert (
        activation_memory(S, B, H, A, L, tp=T, pp=8, n_micro=64, stage=3, embedding=True).embedding
        == 0
    )  # only the first stage embeds


def test_flash_attention_drops_the_score_term_and_makes_growth_linear():
    # FlashAttention (Dao et al. 2022) keeps no s x s scores: the 5as/h term goes, 34 stays.
    assert activation_bytes_per_layer(S, B, H, A, flash_attention=True) == SBH * 34
    assert activation_bytes_per_layer(
        S, B, H, A, T, True, flash_attention=True
    ) == activation_bytes_per_layer(S, B, H, A, T, True, "selective")
    # Review example: Llama-2-7B, seq 8192 vs 2048: 12.4x with the scores, 4x without them.
    h, a = 4096, 32
    ratio = activation_bytes_per_layer(8192, 1, h, a) / activation_bytes_per_layer(2048, 1, h, a)
    flash = activation_bytes_per_layer(
        8192, 1, h, a, flash_attention=True
    ) / activation_bytes_per_layer(2048, 1, h, a, flash_attention=True)
    assert round(ratio, 1) == 12.4 and flash == 4.0
    assert round(activation_bytes_per_layer(8192, 1, h, a) / 1e9, 1) == 11.9  # GB per layer
    assert round(activation_bytes_per_layer(8192, 1, h, a) * 32 / 1e9) == 380  # 32 layers


@pytest.mark.parametrize("p, m, v", [(4, 8, 2), (4, 8, 4), (8, 16, 2), (4, 4, 2)])
def test_interleaved_memory_on_every_stage_matches_the_simulation(p, m, v):
    # Interleaving raises memory on EVERY stage, the last one most in relative terms
    # (review: lab 10's "use the interleaved schedule" as a stage-0 fix is wrong).
    peaks = schedule("interleaved", p, m, v).peak_in_flight
    for stage in range(p):
        am = activation_memory(S, B, H, A, L, pp=p, n_micro=m, virtual_stages=v, stage=stage)
        assert am.in_flight * am.interleave_factor == pytest.approx(peaks[stage] / v)
        plain = activation_memory(S, B, H, A, L, pp=p, n_micro=m, stage=stage)
        assert am.total >= plain.total
