"""Input validation (and the one line fit) shared by the calculators.

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



def line_fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Ordinary least squares y = intercept + slope * x, closed form: (intercept, slope, r2).

    Shared by fit_alpha_beta (t = alpha + beta * D, lab 03) and fit_serial_fraction
    (T = a + b / N, lab 10). Callers validate first: equal lengths, two distinct xs.
    """
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys))
    return intercept, slope, 1.0 if ss_tot == 0 else 1 - ss_res / ss_tot
