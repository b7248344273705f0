"""Floating-point formats from their bit counts, and per-tensor FP8 scaling (lab 02).

A binary float with E exponent bits and M mantissa bits stores sign x 2^(e - bias) x 1.m,
bias = 2^(E-1) - 1. From E and M alone:

    relative step (eps)   2^-M                     the gap between 1.0 and the next number
    smallest normal       2^(1 - bias)
    smallest subnormal    2^(1 - bias - M)         below it everything rounds to 0 (underflow)
    largest value         (2 - 2^-M) 2^(2^E - 2 - bias)     IEEE-like: the top exponent code
                                                  is kept for inf/NaN (fp32, fp16, bf16, e5m2)
                          (2 - 2^(1-M)) 2^(2^E - 1 - bias)  e4m3 "fn" (finite, no inf): the top
                                                  code holds numbers, only S.1111.111 is NaN

FP8 (Micikevicius et al. 2022, "FP8 Formats for Deep Learning", Sec. 3): E4M3 (max 448, more
precision) for weights and activations, E5M2 (max 57344, more range) for gradients. Their range
is so short that every tensor is multiplied by a SCALE before the cast and divided after:

    current scaling   scale = max_fp8 / amax(this tensor) / 2^margin
    delayed scaling   scale = max_fp8 / max(amax history of the last steps) / 2^margin
                      (one pass fewer over the tensor; the history is that of previous steps,
                      so a sudden outlier can still saturate; Transformer Engine's default)

Pure formulas; the torch side (casts, an emulated matmul) is in experiments/lab02/fp8.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from lab_utils.calc._check import (
    boolean,
    choice,
    nonneg_int,
    nonneg_num,
    pos_num,
    sequence,
    text,
    whole,
)


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format derived from its exponent and mantissa bit counts."""

    name: str
    exp_bits: int
    mant_bits: int
    finite_only: bool = False  # e4m3fn: no inf, the top exponent code holds numbers

    def __post_init__(self) -> None:
        text("FloatFormat.name", self.name)
        whole("FloatFormat.exp_bits", self.exp_bits, 2, 11)
        whole("FloatFormat.mant_bits", self.mant_bits, 1, 52)
        boolean("FloatFormat.finite_only", self.finite_only)

    @property
    def bits(self) -> int:
        return 1 + self.exp_bits + self.mant_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exp_bits - 1) - 1

    @property
    def eps(self) -> float:
        """Relative step: the gap between 1.0 and the next representable number."""
        return 2.0**-self.mant_bits

    @property
    def smallest_normal(self) -> float:
        return 2.0 ** (1 - self.bias)

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.mant_bits)

    @property
    def max(self) -> float:
        if self.finite_only:
            return (2 - 2.0 ** (1 - self.mant_bits)) * 2.0 ** (2**self.exp_bits - 1 - self.bias)
        return (2 - 2.0**-self.mant_bits) * 2.0 ** (2**self.exp_bits - 2 - self.bias)

    @property
    def binades(self) -> float:
        """Dynamic range in powers of two, smallest subnormal to max."""
        return math.log2(self.max / self.smallest_subnormal)


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("fp32", 8, 23),
        FloatFormat("fp16", 5, 10),
        FloatFormat("bf16", 8, 7),
        FloatFormat("e5m2", 5, 2),
        FloatFormat("e4m3", 4, 3, finite_only=True),
    )
}


def float_format(name: str) -> FloatFormat:
    """One of ``FORMATS`` by name (fp32, fp16, bf16, e5m2, e4m3). Lab 02."""
    return FORMATS[choice("name", name, tuple(FORMATS))]


def format_max(name: str) -> float:
    """Largest finite value of a format (cards: e4m3 -> 448, fp16 -> 65504). Lab 02."""
    return float_format(name).max


def current_scale(amax: float, fmt_max: float, margin: int = 0) -> float:
    """Per-tensor CURRENT scaling: the tensor's own largest |value| lands at fmt_max / 2^margin.

    scale = fmt_max / amax / 2^margin; an all-zero tensor gets scale 1 (nothing to fit).
    Micikevicius et al. 2022, Sec. 4; Transformer Engine's recipe. Lab 02.
    """
    amax, fmt_max = nonneg_num("amax", amax), pos_num("fmt_max", fmt_max)
    margin = nonneg_int("margin", margin)
    return 1.0 if amax == 0 else fmt_max / amax / 2.0**margin


def delayed_scale(amax_history: Sequence[float], fmt_max: float, margin: int = 0) -> float:
    """Per-tensor DELAYED scaling: the scale from the largest amax of the PREVIOUS steps.

    scale = fmt_max / max(history) / 2^margin. The current tensor is cast with a scale it did
    not choose: cheaper (no extra pass to find amax before the cast), but an outlier larger
    than the history saturates. An empty history gives scale 1. Lab 02.
    """
    history = sequence("amax_history", amax_history, nonneg_num)
    return current_scale(max(history, default=0.0), fmt_max, margin)


def bytes_per_element(name: str) -> int:
    """Storage of one value: fp32 4, fp16/bf16 2, fp8 1. Lab 02."""
    return float_format(name).bits // 8
