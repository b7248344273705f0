"""Amdahl, Gustafson, serial-fraction fit, MFU and hardware figures (labs 03, 10)."""

import pytest

from lab_utils.calc import (
    DEVICES,
    LINKS,
    NARAYANAN_TABLE1,
    Cluster,
    amdahl_limit,
    amdahl_speedup,
    dgx_h100,
    fit_serial_fraction,
    flops_per_token,
    gustafson_speedup,
    megatron_flops_per_step,
    mfu,
)


def test_amdahl_five_percent_caps_at_20x():
    assert amdahl_limit(0.05) == pytest.approx(20)
    assert amdahl_speedup(0.05, 8) == pytest.approx(1 / (0.05 + 0.95 / 8))  # 5.93x
    assert amdahl_speedup(0.05, 10**9) == pytest.approx(20, rel=1e-6)
    assert amdahl_speedup(0.05, 1024) < 20
    assert amdahl_speedup(0.0, 64) == 64 and amdahl_limit(0.0) == float("inf")


def test_gustafson_scaled_speedup():
    assert gustafson_speedup(0.05, 8) == pytest.approx(7.65)
    assert gustafson_speedup(0.05, 1024) == pytest.approx(1024 - 0.05 * 1023)


def test_fit_serial_fraction_recovers_truth():
    t1, s = 120.0, 0.08
    ns = [1, 2, 4, 8, 16, 32]
    fit = fit_serial_fraction(ns, [t1 * (s + (1 - s) / n) for n in ns])
    assert fit.serial_fraction == pytest.approx(s)
    assert fit.t1 == pytest.approx(t1)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.speedup_limit == pytest.approx(12.5)
    assert fit.predict(64) == pytest.approx(t1 * (s + (1 - s) / 64))


def test_mfu_six_p_tokens():
    # 1B params at 100k tokens/s on 8 A100s: 6e14 / (8 * 312e12) = 24%.
    assert mfu(1e9, 1e5, 8, 312e12) == pytest.approx(6e14 / (8 * 312e12))
    assert flops_per_token(1e9, 24, 2048, 2048) == 6e9 + 12 * 24 * 2048 * 2048


def test_narayanan_table1_percent_of_peak():
    # Their "percentage of theoretical peak" is achieved TFLOP/s / 312 (A100 bf16 dense).
    pct = [
        round(100 * r.tflops_per_gpu / DEVICES["A100-SXM4-80GB"].peak_flops * 1e12)
        for r in NARAYANAN_TABLE1
    ]
    assert pct == [44, 44, 46, 43, 44, 45, 47, 50, 52, 52]


def test_megatron_flops_formula():
    # eq. (3) = 4 passes (fwd, recompute fwd, 2x bwd) x 24 B s l h^2 plus attention/logit terms
    f = megatron_flops_per_step(512, 2048, 24, 2304, 51200)
    base = 96 * 512 * 2048 * 24 * 2304**2
    assert f == pytest.approx(base * (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304)))


def test_device_and_link_figures():
    assert DEVICES["A100-SXM4-80GB"].peak_flops == 312e12
    assert DEVICES["H100-SXM5-80GB"].peak_flops == 989e12
    assert DEVICES["H200-SXM-141GB"].peak_flops == 989e12
    assert DEVICES["V100-SXM2-32GB"].peak_flops == 125e12
    assert 2 * LINKS["NVLink4"].bytes_per_s == 900e9  # 900 GB/s is both directions
    assert LINKS["IB-NDR"].bytes_per_s == 400e9 / 8  # 400 Gb/s = 50 GB/s
    assert LINKS["100GbE"].bytes_per_s == 12.5e9
    c = dgx_h100(32)
    assert c.world == 256 and c.gpu_mem_bytes == 80e9


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: amdahl_speedup(1.5, 8), "serial_fraction must be a fraction between 0 and 1"),
        (lambda: amdahl_speedup(0.1, 0), "n must be a whole number >= 1"),
        (lambda: gustafson_speedup(-0.1, 4), "serial_fraction must be a fraction"),
        (lambda: fit_serial_fraction([1, 2], [1.0]), "2 values but times has 1"),
        (lambda: fit_serial_fraction([4], [1.0]), "at least 2"),
        (lambda: fit_serial_fraction([4, 4], [1.0, 1.1]), "all N are equal"),
        (lambda: fit_serial_fraction([1, 2], [1.0, 0.0]), "each time in times must be a positive"),
        (lambda: fit_serial_fraction([1, 2, 4], [1.0, 4.0, 9.0]), "do not fall with N"),
        (lambda: mfu(1e9, 1e5, 8, 0), "peak_flops must be a positive number"),
        (lambda: flops_per_token(1e9, n_layers=-1), "n_layers must be a whole number >= 0"),
        (lambda: Cluster(8, 0, 80e9, 450e9, 50e9, 989e12), "Cluster.n_nodes must be"),
        (lambda: Cluster(8, 1, 80e9, -1, 50e9, 989e12), "Cluster.intra_node_bw must be"),
    ],
)
def test_scaling_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
