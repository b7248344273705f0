"""Activation memory vs Korthikanti et al. 2022 Table 2 at GPT-3 175B sizes (labs 01, 06, 07)."""
import pytest

from lab_utils.calc import (GB, GiB, activation_bytes_per_layer, activation_memory, fmt_bytes,
                            in_flight_microbatches, schedule)

S, H, A, L, T, B = 2048, 12288, 96, 96, 8, 1
SBH = S * B * H  # 25,165,824


@pytest.mark.parametrize("tp, sp, rc, expected", [
    (1, False, "none", SBH * (34 + 5 * A * S / H)),          # no parallelism: 114 sbh
    (T, False, "none", SBH * (10 + 24 / T + 5 * A * S / (H * T))),   # TP: 23 sbh
    (T, True, "none", SBH / T * (34 + 5 * A * S / H)),      # TP + SP: 14.25 sbh
    (T, False, "selective", SBH * (10 + 24 / T)),           # TP + selective: 13 sbh
    (T, True, "selective", SBH * 34 / T),                    # TP + SP + selective: 4.25 sbh
    (1, False, "full", 2 * SBH),                             # full recompute: 2 sbh
])
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
    big_t = activation_bytes_per_layer(S, B, H, A, tp=1024, recompute="selective")
    assert big_t == pytest.approx(SBH * (10 + 24 / 1024))
    sp = activation_bytes_per_layer(S, B, H, A, tp=1024, sequence_parallel=True,
                                    recompute="selective")
    assert sp == pytest.approx(SBH * 34 / 1024)


def test_first_stage_1f1b_holds_all_layers_worth():
    # p micro-batches of L/p layers = L layers of one micro-batch, whatever p is.
    per_layer = activation_bytes_per_layer(S, B, H, A, T, True, "selective")
    for p in (1, 2, 4, 8, 16):
        am = activation_memory(S, B, H, A, L, tp=T, pp=p, n_micro=64, sequence_parallel=True,
                               recompute="selective")
        assert am.in_flight == p
        assert am.total == pytest.approx(L * per_layer)
    last = activation_memory(S, B, H, A, L, tp=T, pp=8, n_micro=64, sequence_parallel=True,
                             recompute="selective", stage=7)
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


@pytest.mark.parametrize("call, match", [
    (lambda: activation_bytes_per_layer(S, B, H, A, recompute="some"), "recompute must be"),
    (lambda: activation_bytes_per_layer(0, B, H, A), "seq_len must be a whole number"),
    (lambda: activation_memory(S, B, H, A, 10, pp=4), "pp=4 must divide n_layers=10"),
    (lambda: in_flight_microbatches("1f1b", 4, 8, stage=4), r"stage must be in 0\.\.3"),
    (lambda: in_flight_microbatches("pipedream", 4, 8), "schedule must be one of"),
])
def test_activation_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
