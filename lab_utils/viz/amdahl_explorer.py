"""Amdahl explorer: speedup vs devices for a serial fraction s, with the 1/s ceiling (lab 10).

A thin view over ``calc.amdahl_speedup`` (strong scaling, Amdahl 1967), ``calc.amdahl_limit``
and ``calc.gustafson_speedup`` (weak scaling, Gustafson 1988).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab_utils.calc import amdahl_limit, amdahl_speedup, gustafson_speedup
from lab_utils.calc._check import boolean, fraction, whole
from lab_utils.viz._base import Explorer, Spec
from lab_utils.viz.controls import checkbox, float_text, int_text
from lab_utils.viz.style import FIGURE_WIDTH, LEGEND_BESIDE

MAX_DEVICES = 10_000_000


@dataclass(frozen=True)
class AmdahlState:
    serial_fraction: float
    n_max: int
    gustafson: bool
    log_axes: bool


def validate(values: dict[str, Any]) -> AmdahlState:
    s = fraction("the serial fraction s", values["serial_fraction"], hint="e.g. 0.05 for 5%")
    n = whole("max devices N", values["n_max"], 2, MAX_DEVICES)
    return AmdahlState(
        s, n, boolean("gustafson", values["gustafson"]), boolean("log axes", values["log_axes"])
    )


def devices(n_max: int) -> list[int]:
    """1..n_max, thinned to ~200 geometric points when large (always includes n_max)."""
    if n_max <= 200:
        return list(range(1, n_max + 1))
    return sorted({round(n_max ** (i / 199)) for i in range(200)} | {n_max})


def figure_spec(st: AmdahlState) -> Spec:
    ns = devices(st.n_max)
    s = st.serial_fraction
    ceiling = amdahl_limit(s)
    gus = [gustafson_speedup(s, n) for n in ns] if st.gustafson else []
    data = [
        dict(
            type="scatter",
            mode="lines",
            name="ideal (S = N)",
            x=ns,
            y=[float(n) for n in ns],
            line=dict(color="grey", dash="dot"),
            hovertemplate="N=%{x}: ideal %{y:.4g}x<extra></extra>",
        ),
        dict(
            type="scatter",
            mode="lines",
            name=f"Amdahl, s={s:g} (strong scaling)",
            x=ns,
            y=[amdahl_speedup(s, n) for n in ns],
            line=dict(color="#4C78A8", width=3),
            hovertemplate="N=%{x}: Amdahl %{y:.4g}x<extra></extra>",
        ),
        dict(
            type="scatter",
            mode="lines",
            name=f"Gustafson, s={s:g} (weak scaling)",
            x=ns if gus else [],
            y=gus,
            line=dict(color="#F58518"),
            hovertemplate="N=%{x}: Gustafson %{y:.4g}x<extra></extra>",
        ),
        # No ceiling when s = 0: the trace is emptied, not removed, so the figure keeps its
        # shape (and the live widget updates in place).
        dict(
            type="scatter",
            mode="lines",
            name=f"Amdahl ceiling 1/s = {ceiling:.4g}x" if s > 0 else "no ceiling (s = 0)",
            x=[ns[0], ns[-1]] if s > 0 else [],
            y=[ceiling, ceiling] if s > 0 else [],
            line=dict(color="#E45756", dash="dash"),
            hovertemplate="ceiling %{y:.4g}x<extra></extra>",
        ),
    ]
    kind = "log" if st.log_axes else "linear"
    layout = dict(
        width=FIGURE_WIDTH,
        height=430,
        margin=dict(l=70, r=20, t=60, b=50),
        title=dict(text=f"Speedup vs devices, serial fraction s = {s:g}"),
        xaxis=dict(title=dict(text="N (devices)"), type=kind),
        yaxis=dict(title=dict(text="speedup S(N) (x single device)"), type=kind),
        legend=LEGEND_BESIDE,
    )
    return {"data": data, "layout": layout}


def summary_html(st: AmdahlState) -> str:
    s, n = st.serial_fraction, st.n_max
    amd = amdahl_speedup(s, n)
    if s == 0:
        cap = "With s = 0 there is no ceiling: speedup is N."
    else:
        lim = amdahl_limit(s)
        # N at which Amdahl reaches 90% of its ceiling: 1/(s + (1-s)/N) = 0.9/s -> N = 9(1-s)/s
        n90 = 9 * (1 - s) / s
        cap = (
            f"Ceiling 1/s = <b>{lim:.4g}x</b> however many devices; 90% of it needs "
            f"N = {n90:.4g} devices."
        )
    gus = (
        f" Gustafson (batch grows with N): {gustafson_speedup(s, n):.4g}x." if st.gustafson else ""
    )
    return f"Amdahl speedup at N = {n}: <b>{amd:.4g}x</b> ({amd / n:.1%} efficiency). {cap}{gus}"


class AmdahlExplorer(Explorer):
    """Amdahl (and Gustafson) speedup. ``set(serial_fraction=0.05, n_max=1024)``."""

    TITLE = "Amdahl explorer"
    CSS = "amdahl-explorer"
    validate = staticmethod(validate)
    figure_spec = staticmethod(figure_spec)
    summary_html = staticmethod(summary_html)

    def __init__(self, **initial: Any) -> None:
        controls = {
            "serial_fraction": float_text("serial fraction s (0-1)", 0.05),
            "n_max": int_text("max devices N", 1024),
            "gustafson": checkbox("show Gustafson", True),
            "log_axes": checkbox("log axes", True),
        }
        super().__init__(controls, **initial)


def amdahl_explorer(**initial: Any) -> AmdahlExplorer:
    """A ready-to-display Amdahl explorer (lab 10)."""
    return AmdahlExplorer(**initial)
