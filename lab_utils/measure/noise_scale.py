"""The gradient noise scale, measured: how large a batch still helps (lab 02).

McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", App. A.1): the squared norm
of a batch-B gradient estimate has expectation |G|^2 + tr(Sigma) / B (G the true gradient, Sigma
the per-example covariance). Measuring E|g_B|^2 at two sizes, b < B, gives unbiased estimates

    |G|^2     = (B E|g_B|^2 - b E|g_b|^2) / (B - b)
    tr(Sigma) = (E|g_b|^2 - E|g_B|^2) / (1/b - 1/B)

and the SIMPLE NOISE SCALE B_noise = tr(Sigma) / |G|^2, their estimate of the critical batch
(calc.large_batch_tradeoff). With few batches the estimates are noisy: average several.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class NoiseScale:
    small: int  # examples per small batch
    big: int  # examples per big batch
    grad_sq: float  # |G|^2 estimate
    trace_cov: float  # tr(Sigma) estimate
    b_noise: float  # tr(Sigma) / |G|^2, in examples


def _mean_grad_sq(model: nn.Module, batches: Sequence[Batch], loss_fn: Callable) -> float:
    total = 0.0
    for x, y in batches:
        model.zero_grad()
        loss_fn(model(x), y).backward()
        total += sum(
            float(p.grad.double().pow(2).sum()) for p in model.parameters() if p.grad is not None
        )
    model.zero_grad()
    return total / len(batches)


def gradient_noise_scale(
    model: nn.Module, small: Sequence[Batch], big: Sequence[Batch], loss_fn: Callable
) -> NoiseScale:
    """B_noise of ``model`` at its current weights from gradients of ``small`` and ``big``
    batches (lists of (inputs, targets); every batch of a list the same size, the big ones
    larger). Leaves the model's .grad cleared; the weights are not changed."""
    if not small or not big:
        raise ValueError("pass at least one small and one big batch")
    b, bb = len(small[0][0]), len(big[0][0])
    if not b < bb:
        raise ValueError(f"the small batches ({b} examples) must be smaller than the big ({bb})")
    gs, gb = _mean_grad_sq(model, small, loss_fn), _mean_grad_sq(model, big, loss_fn)
    grad_sq = (bb * gb - b * gs) / (bb - b)
    trace = (gs - gb) / (1 / b - 1 / bb)
    return NoiseScale(b, bb, grad_sq, trace, trace / grad_sq if grad_sq > 0 else float("inf"))
