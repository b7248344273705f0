"""How large a batch can get: learning-rate scaling rules and the critical batch size (lab 02).

lr_for_batch(base_lr, base_batch, batch, "sgd")    linear rule: lr x k (Goyal et al. 2017)
lr_for_batch(base_lr, base_batch, batch, "adam")   square-root rule: lr x sqrt(k) (Malladi
    et al. 2022, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms": the SDE
    of Adam stays the same when the batch grows k times and the learning rate sqrt(k) times,
    with 1 - beta scaled by k; both rules hold only below the critical batch)
large_batch_tradeoff(batch, critical_batch)        McCandlish et al. 2018 ("An Empirical
    Model of Large-Batch Training", eq. 2.11-2.12): steps S = S_min (1 + B_crit / B) and
    examples E = E_min (1 + B / B_crit). Below B_crit doubling the batch almost halves the
    steps (data parallelism scales); above it, steps barely fall and the examples (compute)
    grow: more ranks buy little. B_crit is estimated by the gradient noise scale
    tr(Sigma) / |G|^2 (lab_utils.measure.gradient_noise_scale), which grows as the loss falls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lab_utils.calc._check import choice, pos_int, pos_num


def lr_for_batch(base_lr: float, base_batch: int, batch: int, optimizer: str = "sgd") -> float:
    """The learning rate for ``batch`` given one tuned at ``base_batch``: linear for SGD,
    square root for Adam/AdamW (see the module docstring). Lab 02."""
    lr = pos_num("base_lr", base_lr)
    b0, b = pos_int("base_batch", base_batch), pos_int("batch", batch)
    rule = choice("optimizer", optimizer, ("sgd", "adam", "adamw"))
    k = b / b0
    return lr * (k if rule == "sgd" else math.sqrt(k))


@dataclass(frozen=True)
class BatchTradeoff:
    """At batch B: steps and examples as multiples of the minimum possible (S_min, E_min)."""

    batch: float
    critical_batch: float
    steps_over_min: float  # S / S_min = 1 + B_crit / B
    examples_over_min: float  # E / E_min = 1 + B / B_crit


def large_batch_tradeoff(batch: float, critical_batch: float) -> BatchTradeoff:
    """McCandlish et al. 2018's trade-off between steps and examples at batch ``batch``.
    Lab 02."""
    b, bc = pos_num("batch", batch), pos_num("critical_batch", critical_batch)
    return BatchTradeoff(b, bc, 1 + bc / b, 1 + b / bc)
