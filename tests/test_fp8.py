"""FP8 and the other float formats (lab 02): the bit-count formulas against torch.finfo, per-tensor
scaling, and the CPU emulation of an FP8 matmul against torch's own FP8 GEMM."""

import math

import pytest
import torch

from lab_utils.calc import DEVICES, bytes_per_element, current_scale, delayed_scale, float_format
from lab_utils.experiments.lab02 import fp8

TORCH = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "e4m3": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
}


@pytest.mark.parametrize("name", list(TORCH))
def test_formula_matches_torch_finfo(name):
    f, fi = float_format(name), torch.finfo(TORCH[name])
    assert f.bits == fi.bits
    assert f.max == fi.max and f.smallest_normal == fi.smallest_normal and f.eps == fi.eps
    # the smallest subnormal is representable and half of it rounds to zero
    assert torch.tensor(f.smallest_subnormal).to(TORCH[name]).float().item() == f.smallest_subnormal
    assert torch.tensor(f.smallest_subnormal / 2).to(TORCH[name]).float().item() == 0.0


def test_published_fp8_figures():
    # Micikevicius et al. 2022, Table 1
    e4m3, e5m2 = float_format("e4m3"), float_format("e5m2")
    assert (e4m3.max, e4m3.smallest_normal, e4m3.smallest_subnormal) == (448, 2**-6, 2**-9)
    assert (e5m2.max, e5m2.smallest_normal, e5m2.smallest_subnormal) == (57344, 2**-14, 2**-16)
    assert float_format("fp16").max == 65504
    assert [bytes_per_element(n) for n in ("fp32", "bf16", "e4m3")] == [4, 2, 1]


def test_scales():
    assert current_scale(2.0, 448.0) == 224.0
    assert current_scale(2.0, 448.0, margin=1) == 112.0
    assert current_scale(0.0, 448.0) == 1.0
    assert delayed_scale([1.0, 4.0, 2.0], 448.0) == 112.0
    assert delayed_scale([], 448.0) == 1.0
    with pytest.raises(ValueError, match="amax"):
        current_scale(-1.0, 448.0)


def test_h100_fp8_peak_is_twice_bf16():
    for name in ("H100-SXM5-80GB", "H100-PCIe-80GB", "H200-SXM-141GB"):
        d = DEVICES[name]
        assert math.isclose(d.peak_fp8_flops, 2 * d.peak_flops, rel_tol=0.01), name
    assert DEVICES["A100-SXM4-80GB"].peak_fp8_flops == 0


def test_scaling_rescues_underflow_and_overflow():
    grads = torch.cat([g.flatten() for g in fp8.model_grads().values()])
    raw, scaled = (
        fp8.cast_report(grads, "e4m3"),
        fp8.cast_report(grads, "e4m3", fp8.current(grads, "e4m3")),
    )
    assert raw.flushed > 0.1 and scaled.flushed < raw.flushed / 10
    big = fp8.cast_report(grads * 1e6, "e5m2")
    assert big.saturated > 0 and big.inf_or_nan > 0  # e5m2 has inf: overflow -> inf
    fixed = fp8.cast_report(grads * 1e6, "e5m2", fp8.current(grads * 1e6, "e5m2"))
    assert fixed.saturated == 0 and fixed.inf_or_nan == 0


def test_delayed_scaling_misses_a_spike_current_does_not():
    g = torch.linspace(-1, 1, 101)
    rows = fp8.delayed_vs_current([g, g, g * 50, g], "e4m3", history=2)
    assert rows[2]["delayed: overflowed"] > 0 and rows[2]["current: overflowed"] == 0
    assert rows[3]["delayed scale"] == pytest.approx(448 / 50)  # the spike is in the history


def test_emulated_matmul_matches_torch_scaled_mm():
    torch.manual_seed(0)
    a, b = torch.randn(32, 64) * 0.01, torch.randn(64, 16) * 0.01
    ref = fp8.scaled_mm_reference(a, b)
    if ref is None:
        pytest.skip("this torch build has no CPU _scaled_mm")
    torch.testing.assert_close(fp8.emulated_matmul(a, b), ref, rtol=1e-5, atol=1e-7)
    errors = {r["matmul"]: r["rel. error"] for r in fp8.matmul_errors(a, b)}
    assert errors["fp32"] < errors["bf16 inputs"] < errors["e4m3 x e4m3, per-tensor scaling"]
    assert errors["e4m3 x e4m3, per-tensor scaling"] < errors["e4m3 x e4m3, no scaling"]
