"""Lab 03's figures and table rows: the plumbing that turns its measurements into views.

ring_rows(sweep, D)              bytes rank 0 sent in one all-reduce, per group size n
fit_figure(sizes, times, fits, ...)  time vs size of each implementation, its alpha-beta fit
wall_fit_rows(fits, n)           the wall-clock fit: alpha', algbw, busbw, r^2 (None: no slope)
emulated_fit_rows(fits, n, link)  the emulated fit next to the formula's 2(n-1) alpha
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from lab_utils.calc import bus_bandwidth, ring_bytes_per_rank
from lab_utils.viz.style import titled


def ring_rows(sweep: dict, size: int) -> list[dict]:
    """Lab 03: per group size n of ``all_reduce_sweep``, the ring's sends and bytes for a message
    of ``size`` bytes: formula, byte ledger, wire (ours and gloo's), the reduce-scatter phase."""
    rows = []
    for n, sw in sweep.items():
        rows.append(
            {
                "n": n,
                "ring sends": sw["sends"]["ring"],
                "2(n-1)": 2 * (n - 1),
                "formula": round(ring_bytes_per_rank("all_reduce", n, size)),
                "ledger, ring": round(sw["bytes"]["ring"]),
                "wire, ring": sw["wire"]["ring"],
                "wire, gloo": sw["wire"]["gloo"],
                "ledger, RS phase": round(sw["phases"]["reduce_scatter"]),
                "(n-1)/n D": round(ring_bytes_per_rank("reduce_scatter", n, size)),
            }
        )
    return rows


def fit_figure(
    sizes: list[int],
    times: dict[str, list[float]],
    fits: dict,
    *,
    title: str,
    label: str,
    y_title: str,
    unit: float,
    mode: str,
) -> go.Figure:
    """Lab 03: each implementation's times (seconds x ``unit``) vs size, log-log, with its fit
    t = alpha' + beta' D dotted; ``label`` names where the times come from."""
    fig = go.Figure()
    for impl, fit in fits.items():
        y = [t * unit for t in times[impl]]
        fig.add_trace(go.Scatter(x=sizes, y=y, mode=mode, name=f"{impl} ({label})"))
        line = [(fit.alpha_s + fit.beta_s_per_byte * s) * unit for s in sizes]
        fig.add_trace(
            go.Scatter(x=sizes, y=line, mode="lines", line_dash="dot", name=f"{impl} fit")
        )
    return titled(fig, title, "D (bytes)", y_title, 800, 400, xaxis_type="log", yaxis_type="log")


def wall_fit_rows(fits: dict, n: int) -> list[dict]:
    """Lab 03: the wall-clock fits; a slope lost in noise (beta' <= 0) shows no bandwidth."""
    rows = []
    for impl, f in fits.items():
        ok = math.isfinite(f.bandwidth)
        rows.append(
            {
                "impl": impl,
                "alpha' (us)": f.alpha_s * 1e6,
                "algbw at large D = 1/beta' (GB/s)": f.bandwidth / 1e9 if ok else None,
                "x 2(n-1)/n = busbw (GB/s)": (
                    bus_bandwidth("all_reduce", n, f.bandwidth) / 1e9 if ok else None
                ),
                "r^2": f.r2,
            }
        )
    return rows


def emulated_fit_rows(fits: dict, n: int, link) -> list[dict]:
    """Lab 03: the fits on the emulated clock, next to the formula's latency 2(n-1) alpha."""
    return [
        {
            "impl": impl,
            "alpha' (us)": f.alpha_s * 1e6,
            "2(n-1) alpha (us, formula)": 2 * (n - 1) * link.latency_s * 1e6,
            "1/beta' = algbw (GB/s)": f.bandwidth / 1e9,
            "busbw (GB/s)": bus_bandwidth("all_reduce", n, f.bandwidth) / 1e9,
            "r^2": f.r2,
        }
        for impl, f in fits.items()
    ]
