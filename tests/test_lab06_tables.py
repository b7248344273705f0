"""Lab 06's table rows (lab_utils.experiments.lab06.tables): the numbers they derive, and a clear
message for a calculator that does not answer every claim."""

from types import SimpleNamespace as NS

import pytest

from lab_utils.experiments.lab06 import tables


def test_link_row_divides_by_the_compute_it_hides_behind():
    row = tables.link_row("NVLink", tp_s=2e-3, pp_s=3e-3, compute_s=4e-3, layers=12)
    assert row["TP comm / layer"] == pytest.approx(2.0) and row["vs compute"] == 0.5
    assert row["PP comm / stage of 12 layers"] == pytest.approx(3.0)
    assert row["vs stage compute"] == pytest.approx(3e-3 / (4e-3 * 12))


def test_share_and_activation_rows_compare_to_t1():
    shares = [NS(t=1, seconds=4.0, gflops=1.0), NS(t=4, seconds=2.0, gflops=0.5)]
    rows = tables.share_rows(shares)
    assert [r["speedup vs t=1"] for r in rows] == [1.0, 2.0]
    assert rows[1]["all-reduce bytes/rank (x D)"] == pytest.approx(2 * 3 / 4)  # ring: 2(t-1)/t
    mem = [NS(t=1, sp=False, formula=90, extras=10, measured=100)]
    mem.append(NS(t=4, sp=True, formula=20, extras=5, measured=25))
    assert [r["vs t=1"] for r in tables.activation_rows(mem)] == [1.0, 0.25]


def test_dtensor_rows_and_dx_of_token_ids():
    dt = NS(
        losses={"unsharded": [3.0, 2.0], "ours": [3.0, 2.5]},
        calls={"unsharded": (0, 0), "ours": (2, 2)},
    )
    rows = tables.dtensor_rows(dt)
    assert rows[1]["loss step 1"] == 2.5 and rows[1]["max|Δ loss| vs unsharded"] == 0.5
    check = NS(t=2, module="TinyGPT", out=0.0, dx=float("nan"), dW=0.0, shapes={})
    assert tables.check_rows([check])[0]["max|Δ dx|"] == "n/a (token ids)"


def test_claim_rows_name_the_missing_key():
    values = dict.fromkeys(tables.CLAIMS, 1.0)
    assert len(tables.claim_rows(values)) == len(tables.CLAIMS)
    del values["nvlink"]
    with pytest.raises(ValueError, match="nvlink"):
        tables.claim_rows(values)
