"""Scaling laws of parallel speedup and model FLOPs utilisation (labs 10, 12).

Amdahl (fixed problem, strong scaling) vs Gustafson (problem grows with N, weak scaling);
a least-squares fit of the serial fraction from a measured scaling curve; MFU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from lab_utils.calc._check import (
    flop_rate,
    fraction,
    nonneg_int,
    nonneg_num,
    pos_int,
    pos_num,
    sequence,
)
from lab_utils.calc._line_fit import line_fit


def amdahl_speedup(serial_fraction: float, n: int) -> float:
    """S(N) = 1 / (s + (1 - s)/N) (Amdahl 1967). As N -> inf, S -> 1/s: 5% serial caps the
    speedup at 20x however many devices you add. Strong scaling, lab 10."""
    s, n = fraction("serial_fraction", serial_fraction), pos_int("n", n)
    return 1 / (s + (1 - s) / n)


def amdahl_limit(serial_fraction: float) -> float:
    """lim_{N->inf} Amdahl speedup = 1/s (Amdahl 1967). Lab 10."""
    s = fraction("serial_fraction", serial_fraction)
    if s == 0:
        return float("inf")
    return 1 / s


def gustafson_speedup(serial_fraction: float, n: int) -> float:
    """Scaled speedup S(N) = N - s (N - 1) (Gustafson 1988, "Reevaluating Amdahl's Law"):
    the parallel part grows with N (weak scaling: bigger global batch), so speedup stays
    near-linear. Here s is the serial fraction measured ON the N-device run. Lab 10."""
    s, n = fraction("serial_fraction", serial_fraction), pos_int("n", n)
    return n - s * (n - 1)


@dataclass(frozen=True)
class SerialFit:
    """T(N) = t1 * (s + (1 - s)/N) fitted to measurements; ``r2`` of the fit."""

    t1: float
    serial_fraction: float
    r2: float

    def predict(self, n: int) -> float:
        return self.t1 * (self.serial_fraction + (1 - self.serial_fraction) / pos_int("n", n))

    @property
    def speedup_limit(self) -> float:
        return float("inf") if self.serial_fraction <= 0 else 1 / self.serial_fraction


def fit_serial_fraction(ns: Sequence[int], times: Sequence[float]) -> SerialFit:
    """Fit Amdahl's model to measured (N, time) pairs of a FIXED problem (strong scaling).

    T(N) = a + b / N is linear in x = 1/N, so ordinary least squares gives a (serial time)
    and b (parallel time); then t1 = a + b and s = a / (a + b) (Amdahl 1967). A negative s
    means the runs were super-linear or noisy; it is returned as fitted, not clipped.
    Lab 10 fits it to a measured scaling curve.
    """
    xs_n = sequence("ns", ns, lambda _, n: pos_int("each N in ns", n))
    ys = sequence("times", times, lambda _, t: pos_num("each time in times", t))
    if len(xs_n) != len(ys):
        raise ValueError(
            f"ns has {len(xs_n)} values but times has {len(ys)}; pass one time per device count"
        )
    if len(xs_n) < 2:
        raise ValueError("need at least 2 (N, time) measurements to fit a serial fraction")
    if len(set(xs_n)) < 2:
        raise ValueError("all N are equal; measure at least two different device counts")
    a, b, r2 = line_fit([1 / n for n in xs_n], ys)
    t1 = a + b
    if b <= 0 or t1 <= 0:
        raise ValueError(
            "the measured times do not fall with N, so Amdahl's model "
            "T = T1 (s + (1-s)/N) does not fit (communication that grows with N "
            "is a different model); check the measurements"
        )
    return SerialFit(t1=t1, serial_fraction=a / t1, r2=r2)


def flops_per_token(n_params: float, n_layers: int = 0, seq_len: int = 0, hidden: int = 0) -> float:
    """Training FLOPs per token: 6 N (+ 12 L s h for attention scores if L, s, h are given).

    6N = 2N forward + 4N backward FLOPs, one multiply-add (2 FLOPs) per parameter per pass
    (Kaplan et al. 2020, Sec. 2.1, C = 6N). The attention term 12 L s h (QK^T and AV, not
    counted in N) follows Chowdhery et al. 2022 (PaLM), Appendix B.
    Excludes recomputation: MFU counts model FLOPs only. Lab 10.
    """
    nonneg_num("n_params", n_params)
    for name, value in (("n_layers", n_layers), ("seq_len", seq_len), ("hidden", hidden)):
        nonneg_int(name, value)
    return 6 * n_params + 12 * n_layers * seq_len * hidden


def mfu(
    n_params: float,
    tokens_per_s: float,
    n_devices: int,
    peak_flops: float,
    n_layers: int = 0,
    seq_len: int = 0,
    hidden: int = 0,
) -> float:
    """Model FLOPs utilisation = flops_per_token * tokens/s / (n_devices * peak FLOP/s).

    With the default (no attention term) this is 6 P T / (n peak) (Chowdhery et al. 2022,
    PaLM, Appendix B). Use dense (non-sparse) bf16 peaks from ``hardware.DEVICES``.
    ``tokens_per_s`` is the throughput of the whole job (all n devices). A result above 1
    (100%) is impossible, so it raises: it almost always means a unit slip (TFLOP/s passed as
    FLOP/s, tokens per step instead of per second, or one device's share of the tokens).
    Lab 10.
    """
    num = flops_per_token(n_params, n_layers, seq_len, hidden) * nonneg_num(
        "tokens_per_s", tokens_per_s
    )
    value = num / (pos_int("n_devices", n_devices) * flop_rate("peak_flops", peak_flops))
    if value > 1:
        raise ValueError(
            f"MFU = {value:.3g} ({value:.3g}x the peak) is above 100%, which no "
            "hardware achieves: check the units of tokens_per_s (tokens per second "
            "for the whole job) and peak_flops (FLOP/s per device, e.g. 989e12, "
            "not 989), and n_devices"
        )
    return value


def megatron_flops_per_step(
    batch: int, seq_len: int, n_layers: int, hidden: int, vocab_size: int
) -> float:
    """F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)): FLOPs of one training iteration WITH full
    activation recomputation (an extra forward, hence 96 = 4 passes x 24).
    Narayanan et al. 2021: the FLOP count behind their Table 1 throughput. Lab 10."""
    b, s = pos_int("batch", batch), pos_int("seq_len", seq_len)
    l, h, v = (
        pos_int("n_layers", n_layers),
        pos_int("hidden", hidden),
        pos_int("vocab_size", vocab_size),
    )
    return 96 * b * s * l * h**2 * (1 + s / (6 * h) + v / (16 * l * h))
