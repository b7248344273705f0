"""Lab 05's tables (lab_utils/experiments/lab05/views.py): they arrange measured numbers, so the
checks are that each row carries the right ratio and that a bad input names what is wrong."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lab_utils.experiments.lab05 import views


def test_claims_table_needs_one_value_per_claim():
    with pytest.raises(ValueError, match="one per claim"):
        views.claims_table([1.0])
    table = views.claims_table([float(i) for i in range(len(views.CLAIMS))])
    assert len(table.cells) == len(views.CLAIMS) and table.columns[2] == "calculator"


def test_accumulation_table_ratios_are_against_ddp():
    run = lambda ledger, wire, checksum: SimpleNamespace(  # noqa: E731
        calls={"all_reduce": 1}, ledger_bytes=ledger, wire=wire, weights_checksum=checksum
    )
    accum = {"DDP + no_sync": run(100.0, 120, 2.0), "ZeRO-2": run(250.0, 400, 2.0)}
    rows = views.accumulation_table(accum, 4).cells
    col = views.accumulation_table(accum, 4).columns
    zero2 = dict(zip(col, rows[1]))
    assert (zero2["vs_DDP"], zero2["wire_vs_DDP"], zero2["weights_vs_DDP"]) == (
        "2.50",
        "3.33",
        "0.0e+00",
    )
