"""calc.rounding: the gap between neighbouring floats and round-to-nearest-even, checked
against torch's own casts to bf16 and fp16 (normal range)."""

import random

import pytest
import torch

from lab_utils.calc import float_gap, round_to_bits


def test_gaps_are_the_formats_relative_step():
    assert float_gap(1.0, 7) == 2.0**-7 and float_gap(1.0, 10) == 2.0**-10
    assert float_gap(1.9999, 7) == 2.0**-7 and float_gap(2.0, 7) == 2.0**-6
    # the same relative step at any size: 1e-4 is resolved as finely as 1.0 (no underflow)
    for x in (1.2e-30, 1.2e-4, 1.2, 1.2e4):
        assert 2.0**-8 < float_gap(x, 7) / x <= 2.0**-7
    assert float_gap(1.2e-4, 7) == 2.0**-21


@pytest.mark.parametrize(
    "mant_bits, dtype, lo, hi", [(7, torch.bfloat16, 1e-30, 1e30), (10, torch.float16, 6.2e-5, 6e4)]
)
def test_rounding_equals_torch_casts(mant_bits, dtype, lo, hi):
    rng = random.Random(0)
    xs = [rng.uniform(lo, hi) if i % 2 else 10 ** rng.uniform(-4, 4) for i in range(4000)]
    xs = torch.tensor([x for x in xs if lo < x < hi], dtype=torch.float32)  # torch casts from fp32
    ours = torch.tensor([round_to_bits(x, mant_bits) for x in xs.tolist()], dtype=torch.float64)
    assert torch.equal(ours, xs.to(dtype).to(torch.float64))
    # ties go to the even neighbour: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 in bf16
    tie = 1 + 2.0**-8
    assert round_to_bits(tie, 7) == 1.0 == torch.tensor(tie).to(torch.bfloat16).item()


def test_the_source_example():
    """0.00012 in bf16 (sources/002, question 4): its neighbours are 0.00011969 and 0.00012016."""
    gap = float_gap(1.2e-4)
    assert round_to_bits(1.2e-4) == pytest.approx(1.20163e-4, rel=1e-5)
    assert round_to_bits(1.2e-4) - gap == pytest.approx(1.19686e-4, rel=1e-5)
    assert round_to_bits(1.2e-4) == torch.tensor(1.2e-4).to(torch.bfloat16).item()
