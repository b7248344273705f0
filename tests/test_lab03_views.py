"""Lab 03's table and figure helpers (lab03.views): rows and traces as the lab reads them."""

import math
from types import SimpleNamespace as NS

from lab_utils.calc import bus_bandwidth, fit_alpha_beta, ring_bytes_per_rank
from lab_utils.experiments import lab03


def test_ring_rows_put_the_formula_beside_ledger_and_wire():
    D = 4 * 12
    sw = {
        "sends": {"ring": 2},
        "bytes": {"ring": 48.0},
        "wire": {"ring": 50, "gloo": None},
        "phases": {"reduce_scatter": 24.0},
    }
    (row,) = lab03.views.ring_rows({2: sw}, D)
    assert row["formula"] == round(ring_bytes_per_rank("all_reduce", 2, D)) == row["ledger, ring"]
    assert row["(n-1)/n D"] == 24 and row["ledger, RS phase"] == 24 and row["2(n-1)"] == 2
    assert (row["wire, ring"], row["wire, gloo"]) == (50, None)


def test_fit_rows_and_figure_read_the_alpha_beta_fit():
    sizes = [100, 1000, 10000]
    times = {"ring": [1e-5 + 1e-9 * s for s in sizes]}
    fits = {"ring": fit_alpha_beta(sizes, times["ring"])}
    (wall,) = lab03.views.wall_fit_rows(fits, 4)
    assert math.isclose(wall["alpha' (us)"], 10.0) and math.isclose(wall["r^2"], 1.0)
    busbw = bus_bandwidth("all_reduce", 4, fits["ring"].bandwidth) / 1e9
    assert math.isclose(wall["x 2(n-1)/n = busbw (GB/s)"], busbw)
    flat = NS(alpha_s=1e-5, beta_s_per_byte=-1e-9, bandwidth=math.inf, r2=0.1)
    assert lab03.views.wall_fit_rows({"gloo": flat}, 4)[0]["x 2(n-1)/n = busbw (GB/s)"] is None
    link = NS(latency_s=2e-6)
    (emu,) = lab03.views.emulated_fit_rows(fits, 4, link)
    assert math.isclose(emu["2(n-1) alpha (us, formula)"], 12.0)
    fig = lab03.views.fit_figure(
        sizes, times, fits, title="t", label="here", y_title="ms", unit=1e3, mode="markers"
    )
    assert [t.name for t in fig.data] == ["ring (here)", "ring fit"]
    assert math.isclose(fig.data[1].y[0], fig.data[0].y[0])  # an exact line: the fit is on it
