"""Goodput explorer: useful share of wall time vs checkpoint interval, under failures (lab 11).

A thin view over lab_utils.calc.goodput: Daly 2006's expected goodput for
exponential failures, its first-order form, and the Young (1974) / Daly (2006) intervals.
Defaults: the Llama 3 405B record (419 unexpected interruptions in 54 days, Meta 2024).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lab_utils.calc.goodput import (
    HOUR,
    LLAMA3_405B,
    MINUTE,
    daly_interval,
    expected_goodput,
    goodput_first_order,
    waste,
    young_interval,
)
from lab_utils.viz._base import Explorer, Spec
from lab_utils.viz.controls import float_text
from lab_utils.viz.style import FIGURE_WIDTH, LEGEND_BESIDE


@dataclass(frozen=True)
class GoodputState:
    mtbf_s: float
    stall_s: float
    restart_s: float
    interval_s: float  # the interval shown (the Daly optimum when the box holds 0)
    chosen: bool  # True when the learner typed an interval


def _number(values: dict[str, Any], key: str, what: str, low: float, high: float) -> float:
    v = values[key]
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or not math.isfinite(v)
        or not low <= v <= high
    ):
        raise ValueError(f"{what} must be a number between {low:g} and {high:g}, got {v!r}")
    return float(v)


def validate(values: dict[str, Any]) -> GoodputState:
    mtbf = _number(values, "mtbf_h", "the mean time between failures (hours)", 0.01, 1e5) * HOUR
    stall = _number(values, "stall_s", "the checkpoint stall (seconds)", 0.01, 1e5)
    restart = _number(values, "restart_min", "the restart time (minutes)", 0, 1e4) * MINUTE
    interval = (
        _number(values, "interval_min", "the checkpoint interval (minutes; 0 = optimum)", 0, 1e5)
        * MINUTE
    )
    chosen = interval > 0
    return GoodputState(
        mtbf, stall, restart, interval if chosen else daly_interval(stall, mtbf), chosen
    )


def _taus(st: GoodputState) -> list[float]:
    lo = max(st.stall_s, 1.0) / 4
    hi = max(8 * st.mtbf_s, 4 * st.interval_s)
    return [lo * (hi / lo) ** (i / 199) for i in range(200)]


def figure_spec(st: GoodputState) -> Spec:
    taus = _taus(st)
    args = (st.stall_s, st.restart_s, st.mtbf_s)
    exact = [100 * expected_goodput(t, *args) for t in taus]
    first = [100 * max(0.0, goodput_first_order(t, *args)) for t in taus]
    young, daly = young_interval(st.stall_s, st.mtbf_s), daly_interval(st.stall_s, st.mtbf_s)
    mins = [t / MINUTE for t in taus]
    data = [
        dict(
            type="scatter",
            mode="lines",
            name="goodput (Daly 2006, exponential failures)",
            x=mins,
            y=exact,
            line=dict(color="#4C78A8", width=3),
            hovertemplate="interval %{x:.3g} min: %{y:.2f}%<extra></extra>",
        ),
        dict(
            type="scatter",
            mode="lines",
            name="first order: 1 - d/t - (t+d)/2M - R/M",
            x=mins,
            y=first,
            line=dict(color="#F58518", dash="dash"),
            hovertemplate="interval %{x:.3g} min: %{y:.2f}%<extra></extra>",
        ),
        dict(
            type="scatter",
            mode="markers",
            name="Young sqrt(2 d M), Daly optimum",
            x=[young / MINUTE, daly / MINUTE],
            y=[100 * expected_goodput(young, *args), 100 * expected_goodput(daly, *args)],
            marker=dict(color="#54A24B", size=10, symbol=["circle", "diamond"]),
            hovertemplate="%{x:.3g} min: %{y:.2f}%<extra></extra>",
        ),
        dict(
            type="scatter",
            mode="markers",
            name="your interval" if st.chosen else "shown",
            x=[st.interval_s / MINUTE],
            y=[100 * expected_goodput(st.interval_s, *args)],
            marker=dict(color="#E45756", size=13, symbol="x"),
            hovertemplate="%{x:.3g} min: %{y:.2f}%<extra></extra>",
        ),
    ]
    layout = dict(
        width=FIGURE_WIDTH,
        height=420,
        margin=dict(l=70, r=20, t=60, b=50),
        title=dict(
            text=f"Goodput vs checkpoint interval (MTBF {st.mtbf_s / HOUR:.3g} h, "
            f"stall {st.stall_s:.3g} s, restart {st.restart_s / MINUTE:.3g} min)"
        ),
        xaxis=dict(title=dict(text="checkpoint interval (minutes of compute)"), type="log"),
        yaxis=dict(title=dict(text="goodput (% of wall time)"), range=[0, 100]),
        legend=LEGEND_BESIDE,
    )
    return {"data": data, "layout": layout}


def summary_html(st: GoodputState) -> str:
    args = (st.stall_s, st.restart_s, st.mtbf_s)
    g, w = expected_goodput(st.interval_s, *args), waste(st.interval_s, *args)
    young = young_interval(st.stall_s, st.mtbf_s)
    which = "your interval" if st.chosen else "the Daly optimum"
    return (
        f"At {which}, {st.interval_s / MINUTE:.3g} min: goodput <b>{g:.1%}</b>. Waste, first "
        f"order: checkpoint stalls {w.checkpoints:.1%}, work lost to failures {w.lost_work:.1%}, "
        f"restarts {w.restarts:.1%}. Young's sqrt(2 d M) = {young / MINUTE:.3g} min. "
        f"Over {LLAMA3_405B.days} days that is {(1 - g) * LLAMA3_405B.days:.1f} days lost."
    )


class GoodputExplorer(Explorer):
    """``set(mtbf_h=3.09, stall_s=30, restart_min=5, interval_min=0)`` (0: the Daly optimum)."""

    TITLE = "Goodput explorer"
    CSS = "goodput-explorer"
    validate = staticmethod(validate)
    figure_spec = staticmethod(figure_spec)
    summary_html = staticmethod(summary_html)

    def __init__(self, **initial: Any) -> None:
        controls = {
            "mtbf_h": float_text("MTBF of the job (h)", round(LLAMA3_405B.mtbf_s / HOUR, 2)),
            "stall_s": float_text("checkpoint stall (s)", 30.0),
            "restart_min": float_text("restart + reload (min)", 5.0),
            "interval_min": float_text("interval (min, 0 = optimum)", 0.0),
        }
        super().__init__(controls, **initial)


def goodput_explorer(**initial: Any) -> GoodputExplorer:
    """A ready-to-display goodput explorer (lab 11)."""
    return GoodputExplorer(**initial)
