"""Input validation shared by the calculators.

Widgets show these messages to learners, so each one says what is wrong AND how to fix it.
"""
from __future__ import annotations

from typing import Iterable


def pos_int(name: str, value: object) -> int:
    """Return ``value`` if it is an int >= 1, else raise a readable ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return value


def nonneg_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
    return value


def pos_num(name: str, value: object) -> float:
    """Return ``value`` as float if it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or value == float("inf"):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def nonneg_num(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
            or value == float("inf"):
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


def fraction(name: str, value: object) -> float:
    """A number in [0, 1] (e.g. a serial fraction)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a fraction between 0 and 1, got {value!r}")
    return float(value)


def choice(name: str, value: object, options: Iterable[object]) -> str:
    opts = list(options)
    if value not in opts:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, opts))}; got {value!r}")
    return value  # type: ignore[return-value]

