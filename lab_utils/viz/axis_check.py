"""A figure whose axis runs far beyond its data is refused (issue 37: lab 09's log axis to 10^85).

plotly places an annotation on a LOG axis at log10 of its coordinate (y=80 means 10^80) but a
shape at the coordinate itself: ``fig.add_hline(y=80, annotation_text="80 GB")`` on a log axis
stretched the axis to 10^85 and flattened every bar. ``axis_problems`` compares, per axis, the span
of the data with where an explicit range, the annotations and the shapes put things; anything more
than 1000x beyond the data on a log axis (10 data spans on a linear one) is named.
``checked(fig)`` raises ValueError with those names; the figure builders and explorers call it.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

LOG_FACTOR = 1e3  # on a log axis: this many times beyond the data's extremes
LINEAR_SPANS = 10.0  # on a linear axis: this many data spans beyond them


def _numbers(values: Any) -> list[float]:
    if values is None or isinstance(values, (str, bytes)):
        return []
    try:
        items = list(values)
    except TypeError:
        return []
    return [
        float(v)
        for v in items
        if isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
    ]


def _data_extent(data: list[dict], letter: str, ref: str) -> tuple[float, float] | None:
    """(min, max) of the numbers the traces on axis ``ref`` ('y', 'x2') put there."""
    found: list[float] = []
    for trace in data:
        if (trace.get(f"{letter}axis") or letter) != ref:
            continue
        values = _numbers(trace.get(letter))
        value_axis = "x" if trace.get("orientation") == "h" else "y"
        base = _numbers(trace.get("base"))
        if trace.get("type") == "bar" and letter == value_axis and base:
            values = [v + b for v, b in zip(values, base)] + base
        found += values
    return (min(found), max(found)) if found else None


def _placed(layout: dict, letter: str, ref: str, log: bool) -> list[tuple[str, float]]:
    """(what, data coordinate) of everything the layout places on axis ``ref``."""
    out: list[tuple[str, float]] = []
    axis = layout.get(f"{letter}axis{ref[1:]}") or {}
    for end in _numbers(axis.get("range")):
        out.append(("its range", 10**end if log else end))
    for a in layout.get("annotations") or []:
        if a.get(f"{letter}ref", letter) == ref and _numbers([a.get(letter)]):
            value = float(a[letter])
            where = f"annotation {str(a.get('text', ''))[:30]!r} at {letter}={value:g}"
            out.append((where + (" (log units)" if log else ""), 10**value if log else value))
    for s in layout.get("shapes") or []:
        if s.get(f"{letter}ref", letter) == ref:
            out += [
                (f"a {s.get('type', 'shape')} at {letter}={v:g}", v)
                for v in _numbers([s.get(f"{letter}0"), s.get(f"{letter}1")])
            ]
    return out


def axis_problems(figure: Any) -> list[str]:
    """Every axis of a figure (a go.Figure or its dict) that would run far beyond its data."""
    fig = figure.to_plotly_json() if hasattr(figure, "to_plotly_json") else figure
    data, layout = list(fig.get("data") or []), dict(fig.get("layout") or {})
    refs = {(letter, t.get(f"{letter}axis") or letter) for t in data for letter in "xy"}
    problems = []
    for letter, ref in sorted(refs):
        extent = _data_extent(data, letter, ref)
        axis = layout.get(f"{letter}axis{ref[1:]}") or {}
        log = axis.get("type") == "log"
        if extent is None or (log and extent[0] <= 0 and extent[1] <= 0):
            continue
        lo, hi = extent
        if log:
            lo = min(v for v in (lo, hi) if v > 0)
            bounds = (lo / LOG_FACTOR, hi * LOG_FACTOR)
        else:
            span = (hi - lo) or abs(hi) or 1.0
            bounds = (lo - LINEAR_SPANS * span, hi + LINEAR_SPANS * span)
        for what, value in _placed(layout, letter, ref, log):
            if not bounds[0] <= value <= bounds[1]:
                problems.append(
                    f"{letter}axis{ref[1:]} ({'log' if log else 'linear'}): the data "
                    f"spans {lo:.3g}..{hi:.3g} but {what} puts it at {value:.3g}"
                )
    return problems


def checked(figure: Any) -> Any:
    """The figure itself, or ValueError naming each axis that would run far beyond its data."""
    problems = axis_problems(figure)
    if problems:
        raise ValueError(
            "this figure's axis would run far beyond its data (a log axis reads an "
            "annotation's position as log10 of it: y=80 means 10^80): " + "; ".join(problems)
        )
    return figure
