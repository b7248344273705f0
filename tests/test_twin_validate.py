"""`python -m lab_utils twin validate`: the emulated grid within 5% of calc, the published rows
within 15% with one efficiency per GPU, every row labelled, exit status 1 on a miss."""

from __future__ import annotations

import pytest

from lab_utils import cli
from lab_utils.twin import validate as v


@pytest.fixture(scope="module")
def table():
    return v.validate(grid=True)


def test_every_row_within_its_bound(table):
    rows, text = table
    assert [r.name for r in rows if r.part == "a"] == [
        "ddp",
        "fsdp",
        "tp",
        "pp-gpipe",
        "pp-1f1b",
        "pp-interleaved",
        "pp-zb-h1",
        "3d",
    ]
    assert len([r for r in rows if r.part == "b"]) == 6
    assert all(r.ok for r in rows), text


def test_rows_say_where_their_numbers_come_from(table):
    rows, text = table
    assert "Narayanan et al. 2021, Table 1" in text and "Llama 3 paper, Table 4" in text
    assert all("analytic extrapolation" in r.how for r in rows if r.part == "b")
    assert "emulated step (real run, virtual clock)" in text
    assert "compute efficiency (one per GPU, never per row)" in text


def test_cli_exit_status(capsys, monkeypatch):
    assert cli.main(["twin", "validate", "--no-grid"]) == 0
    assert "6/6 rows within their bound" in capsys.readouterr().out
    monkeypatch.setattr(v, "PUBLISHED_BOUND", 0.001)
    assert cli.main(["twin", "validate", "--no-grid"]) == 1
    assert "MISS:" in capsys.readouterr().out
