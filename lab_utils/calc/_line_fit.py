"""Ordinary least squares in closed form, shared by two fits (labs 03, 10)."""

from __future__ import annotations


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
