"""measure.gradient_noise_scale against its definition, and the batch-size calculators."""

import math

import pytest
import torch

from lab_utils.calc import compute_optimal, large_batch_tradeoff, lr_for_batch
from lab_utils.measure.noise_scale import gradient_noise_scale


class Mean(torch.nn.Module):
    """Loss = mean over the batch of |w - x_i|^2 / 2: per-example gradient w - x_i, so
    G = w - mu and tr(Sigma) = the data's total variance, both known exactly."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))

    def forward(self, x):
        return x


def loss(x, _):  # the model's output is the data itself; the loss reads the parameter
    return 0.5 * ((MODEL.w - x) ** 2).sum(1).mean()


MODEL = Mean()


def test_noise_scale_recovers_a_known_variance():
    gen = torch.Generator().manual_seed(0)
    mu, sd = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64), 3.0
    draw = lambda n: (mu + sd * torch.randn(n, 3, generator=gen, dtype=torch.float64), None)  # noqa: E731
    small, big = [draw(4) for _ in range(2000)], [draw(64) for _ in range(2000)]
    ns = gradient_noise_scale(MODEL, small, big, loss)
    assert ns.grad_sq == pytest.approx(float(mu @ mu), rel=0.05)  # |G|^2 at w = 0
    assert ns.trace_cov == pytest.approx(3 * sd**2, rel=0.05)
    assert ns.b_noise == pytest.approx(3 * sd**2 / float(mu @ mu), rel=0.1)
    with pytest.raises(ValueError, match="smaller than the big"):
        gradient_noise_scale(MODEL, big, small, loss)


def test_batch_size_rules_and_chinchilla():
    assert lr_for_batch(1e-3, 256, 1024, "sgd") == pytest.approx(4e-3)
    assert lr_for_batch(1e-3, 256, 1024, "adam") == pytest.approx(2e-3)
    t = large_batch_tradeoff(1024, 1024)
    assert (t.steps_over_min, t.examples_over_min) == (2.0, 2.0)  # at B_crit: 2x both
    chinchilla = compute_optimal(5.76e23)  # 70B x 1.4T tokens x 6 ~ 5.9e23
    assert chinchilla.params == pytest.approx(69.3e9, rel=0.01)
    assert chinchilla.tokens == pytest.approx(20 * chinchilla.params)
    assert math.isclose(6 * chinchilla.params * chinchilla.tokens, 5.76e23)
    with pytest.raises(ValueError, match="compute_flops"):
        compute_optimal(5.76)
    with pytest.raises(ValueError, match="optimizer"):
        lr_for_batch(1e-3, 256, 1024, "lamb")


def test_roofline_by_hand():
    """H100 over NVLink 4 and over one NDR NIC; TP and FSDP intensities from their formulas."""
    from lab_utils.calc import critical_intensity, fsdp_intensity, tp_intensity

    assert critical_intensity(989e12, 450e9) == pytest.approx(2197.8, rel=1e-4)
    assert critical_intensity(989e12, 50e9) == pytest.approx(19780)
    assert tp_intensity(8192, 8) == pytest.approx(3 * 8192 / 7)  # bf16: 3h / (t-1)
    assert fsdp_intensity(4096, 2, 2, 2) == pytest.approx(6 * 4096 * 2 / (1 * 6))
    assert tp_intensity(8192, 1) == float("inf")
    with pytest.raises(ValueError, match="device_flops"):
        critical_intensity(989, 450e9)  # TFLOP/s typed as FLOP/s
