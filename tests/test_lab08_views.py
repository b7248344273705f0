"""Lab 08's table rows (experiments/lab08/plans.py time_split_rows, ring.py ring_rows) on
hand-made inputs: each column is the field or the sum it claims to be."""

from types import SimpleNamespace as NS

import pytest

from lab_utils.calc import GB
from lab_utils.experiments.lab08.plans import time_split_rows
from lab_utils.experiments.lab08.ring import RING_FMT, RingCheck, ring_rows


def test_time_split_rows_bubble_time_and_memory():
    plan = NS(
        summary=lambda: "DP=8 TP=8 PP=4",
        compute_s=2.0,
        tp_comm_s=0.5,
        pp_comm_s=0.5,
        dp_comm_s=0.25,
        bubble=0.1,
        step_s=3.5,
        memory_bytes=40 * GB,
    )
    (row,) = time_split_rows([plan])
    assert row["bubble time (s)"] == pytest.approx(0.1 * 3.0)  # of compute + TP + PP comm
    assert (row["plan"], row["DP sync (s)"], row["mem/GPU (GB)"]) == ("DP=8 TP=8 PP=4", 0.25, 40)


def test_ring_rows_keep_the_listed_ranks():
    def check(rank):
        err = {k: 1e-7 for k in ("out", "dq", "dk", "dv")}
        sent = {"forward": 96.0, "backward": 192.0}
        formula = {"forward": 96, "backward": 192}
        return RingCheck(4, True, rank, err, sent, {}, formula, saved=10, saved_full=40)

    rows = ring_rows([check(r) for r in range(4)], ranks=(0, 3))
    assert [r["rank"] for r in rows] == [0, 3]
    assert rows[0]["fwd bytes"] == rows[0]["formula fwd"] == 96
    assert set(RING_FMT) <= set(rows[0])
