"""What a learner types into a prediction box, read as a number in the question's unit.

People type "5/8" for a fraction, "20%" for a share, "64 KB" for a size, "1e9", "0.5x", "1,200".
``read_guess(text, unit)`` accepts each of these and converts to the question's unit:

    read_guess("5/8")                  0.625
    read_guess("20%", unit="%")        20.0     a percentage asked in %: the number itself
    read_guess("20%", unit="fraction") 0.2      a percentage of a fraction: divided by 100
    read_guess("64 KB", unit="B")      64000.0  sizes: KB = 1e3 B, KiB = 1024 B
    read_guess("2 h", unit="minutes")  120.0
    read_guess("0.5x", unit="x DDP")   0.5

Anything else raises ValueError naming what was typed and the unit expected.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?"
_TYPED = re.compile(
    rf"^\s*(?P<num>{_NUMBER})\s*(?:/\s*(?P<den>{_NUMBER}))?\s*(?P<suffix>.*?)\s*$", re.IGNORECASE
)
# sizes in bytes, times in seconds: a guess typed in one of these converts to the question's
_SIZES = {
    "b": 1.0,
    "bytes": 1.0,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "pb": 1e15,
    "kib": 2.0**10,
    "mib": 2.0**20,
    "gib": 2.0**30,
    "tib": 2.0**40,
}
_TIMES = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "seconds": 1.0,
    "min": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hours": 3600.0,
    "day": 86400.0,
    "days": 86400.0,
}
EXAMPLES = "e.g. 2.5, 1e9, 5/8, 20%, 64 KB"


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text.lower())


def _scale(suffix: str, unit: str) -> float | None:
    """The factor from ``suffix`` to ``unit`` when both are sizes or both are times."""
    for table in (_SIZES, _TIMES):
        if suffix in table and unit in table:
            return table[suffix] / table[unit]
    return None


def read_guess(text: str, unit: str = "") -> float:
    """The number ``text`` stands for, in ``unit``; ValueError naming the text otherwise."""
    shown = text.strip()
    cleaned = re.sub(r"(?<=\d)[,_](?=\d)", "", shown)
    match = _TYPED.match(cleaned)
    if not match:
        raise ValueError(f"not a number: {shown!r} ({EXAMPLES})")
    value = float(match["num"])
    if match["den"] is not None:
        if float(match["den"]) == 0:
            raise ValueError(f"not a number: {shown!r} divides by zero")
        value /= float(match["den"])
    suffix, want = _squash(match["suffix"]), _squash(unit)
    if suffix in ("", want):
        pass
    elif suffix == "%":
        value = value if want == "%" else value / 100
    elif suffix in ("x", "×") or (suffix[:1] in "x×" and suffix[1:] == want[1:]):
        if want and not want.startswith("x"):
            raise ValueError(f"{shown!r} is a multiple, but the answer is in {unit}")
    elif (factor := _scale(suffix, want)) is not None:
        value *= factor
    else:
        expected = f"a number in {unit}" if unit else "a plain number"
        raise ValueError(f"not a number: {shown!r}: expected {expected} ({EXAMPLES})")
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {shown!r}")
    return value
