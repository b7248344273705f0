"""Byte units and a formatter shared by every calculator (lab 01 onwards).

All calculators return BYTES (plain int/float). Convert only when printing, with
``fmt_bytes``. Two conventions coexist in the literature, so we name both:

* ``GB = 1e9`` (decimal): the ZeRO paper (Rajbhandari et al. 2020) and GPU datasheets
  ("80 GB") use it; "7B params x 16 B = 112 GB" is decimal.
* ``GiB = 2**30`` (binary): what ``torch.cuda.memory_allocated`` users and nvidia-smi (MiB)
  usually print, and what some activation-memory figures quote.

1 GiB = 1.074 GB, so the same buffer reads ~7% smaller in GiB.
"""

from __future__ import annotations

from lab_utils.calc._check import number, whole

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

UNITS: dict[str, float] = {
    "B": 1,
    "KB": KB,
    "MB": MB,
    "GB": GB,
    "TB": TB,
    "KiB": KiB,
    "MiB": MiB,
    "GiB": GiB,
    "TiB": TiB,
}


def fmt_bytes(n: float, unit: str = "GB", digits: int = 1) -> str:
    """Format a byte count, e.g. ``fmt_bytes(112e9) == "112.0 GB"``.

    ``unit`` is one of B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of
    1024). Introduced in lab 01 (memory anatomy).
    """
    if not isinstance(unit, str) or unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}; use one of {', '.join(UNITS)}")
    if isinstance(n, float) and n != n:  # NaN: a broken upstream computation, do not hide it
        raise ValueError("cannot format NaN bytes; check the inputs of the calculation")
    n = number("n", n)  # may be negative: a difference of two memory figures
    digits = whole("digits", digits, 0, 15)
    return f"{n / UNITS[unit]:.{digits}f} {unit}"
