"""How finely a binary float format resolves a number: the gap between neighbours, and rounding.

A binary float with M stored mantissa bits holds the numbers 2^e x (1 + k / 2^M), k = 0..2^M-1,
in each binade [2^e, 2^(e+1)). So the gap between a normal number x and the next larger one is

    gap(x) = 2^(floor(log2 x) - M)          bf16: M = 7, fp16: M = 10, fp32: M = 23

a fixed RELATIVE step of 2^-M to 2^-(M+1) of x, whatever x's size: bf16 resolves 1e-4 as finely,
relative to its size, as it resolves 1.0. Rounding to nearest (ties to even, the IEEE default
that torch's casts use) moves x by at most gap / 2. Two consequences used in the course:

* an update u added to a weight w in a 16-bit format is lost when |u| < gap(w) / 2: for w = 1.0
  in bf16 that is any |u| < 2^-8 (Micikevicius et al. 2018, Sec. 3.1: why fp32 master weights);
* a small gradient is rounded by the same relative amount as a large one; underflow starts only
  near the format's smallest normal number (bf16: 2^-126, about 1.2e-38, as fp32).

Normal numbers only: the exponent range (overflow, subnormals) is not modelled here; lab 02's
format tables give it. Pure Python on floats. Labs 02 and 12.
"""

from __future__ import annotations

import math

from lab_utils.calc._check import pos_num, whole


def float_gap(x: float, mant_bits: int = 7) -> float:
    """Gap between ``x`` (> 0) and the next larger number with ``mant_bits`` mantissa bits.

    gap = 2^(floor(log2 x) - mant_bits). bf16: 7 bits (gap at 1.0 = 2^-7 = 0.0078125), fp16:
    10, fp32: 23. IEEE 754 binary formats; Micikevicius et al. 2018, Sec. 3.1. Labs 02, 12.
    """
    x = pos_num("x", x)
    mant_bits = whole("mant_bits", mant_bits, 1, 52)
    _, e = math.frexp(x)  # x = f x 2^e with 0.5 <= f < 1, so floor(log2 x) = e - 1
    return math.ldexp(1.0, e - 1 - mant_bits)


def round_to_bits(x: float, mant_bits: int = 7) -> float:
    """``x`` (> 0) rounded to the nearest number with ``mant_bits`` mantissa bits, ties to even.

    What a cast to bf16 (7) or fp16 (10) does to a normal number; e.g. 0.00012 -> 0.00012016
    in bf16. Normal range only (see the module docstring). Labs 02, 12.
    """
    gap = float_gap(x, mant_bits)
    return round(x / gap) * gap  # x / gap is exact (a power of 2); round() ties to even
