"""Lab 10's worker functions (lab_utils/experiments/lab10/): one 2-rank launch, in-process parts.

Timings on a shared CPU are noisy, so the checks are about structure and about what physics
guarantees (no timing asserts): a sleep of t lasts at least t, strong scaling computes the same
losses at every N, the CommLedger's bytes equal the ring formula exactly. The fit of Amdahl's s
from logged step times (the lab's exercise) is checked on synthetic logs.
"""

import pytest
import torch

from lab_utils import run
from lab_utils.calc import bubble, bubble_from_timeline, ring_bytes_per_rank
from lab_utils.exercises.fit_serial_fraction import fit_serial, make_logs
from lab_utils.experiments.lab10 import (
    SCALING_CONFIG,
    CommStats,
    SlowDataset,
    StepLog,
    background_prefetch,
    comm_split,
    loader_experiment,
    matmul_rates,
)
from lab_utils.experiments.lab10.twin import amdahl_curve

MODES = ("strong", "weak")


def _both(ctx):
    from lab_utils.experiments.lab10 import bottleneck_worker
    from lab_utils.experiments.lab10.twin import scaling_steps  # on this machine's wall clock

    return (
        scaling_steps(ctx, [1, 2], global_batch=8, per_rank_batch=4, steps=2),
        bottleneck_worker(ctx, steps=2, bubble_ms=(2, 4)),
    )


@pytest.fixture(scope="module")
def launched():
    return run(_both, 2, threads=1, quiet=True, timeout_s=240, preload=("torch._dynamo",))


def test_scaling_structure(launched):
    res, other = launched[0][0], launched[1][0]
    assert other is None, "only rank 0 reports the scaling runs"
    assert set(res.runs) == set(MODES) and all(set(res.runs[m]) == {1, 2} for m in MODES)
    for mode in MODES:
        for n in (1, 2):
            r = res.get(mode, n)
            rows = 8 // n if mode.endswith("strong") else 4
            assert (r.n, r.rows) == (n, rows), (mode, n)
            assert r.tokens == n * rows * SCALING_CONFIG.seq_len
            assert len(r.log_s) == 3 and r.step_s == min(r.log_s[1:]) > 0  # warm-up logged first
            assert r.cpu_s > 0 and 0 <= r.comm_s <= r.step_s
            assert len(r.losses) == 3  # warm-up + 2 timed steps
    logs = res.step_logs("strong")
    assert [g.n for g in logs] == [1, 2] and all(len(g.step_s) == 3 for g in logs)


def test_amdahl_curve_reports_a_fit_or_a_reason(launched):
    c = amdahl_curve(launched[0][0], [1, 2], "wall clock")
    assert c.label == "wall clock" and (c.fit is None) == bool(c.why)
    assert len(c.times) == len(c.ns) == 2 and c.speedups[0] == 1.0


def test_strong_scaling_computes_the_same_thing(launched):
    res = launched[0][0]
    # same global batch, averaged gradients: one rank or two, the same training run
    torch.testing.assert_close(
        torch.tensor(res.get("strong", 2).losses),
        torch.tensor(res.get("strong", 1).losses),
        rtol=1e-5,
        atol=1e-5,
    )
    # weak scaling at N=2 trains on a different (twice larger) global batch
    assert res.get("weak", 2).losses != res.get("weak", 1).losses


def test_comm_vs_compute(launched):
    per_rank = [launched[r][1] for r in range(2)]
    for attr in ("compute_bound", "comm_bound"):
        for r in per_rank:
            stats = getattr(r, attr)
            assert stats.calls == 1
            assert stats.bytes_sent == ring_bytes_per_rank("all_reduce", 2, stats.grad_bytes)
            assert len(stats.spans) == 2
            assert {e["name"] for e in stats.events} == {"compute", "all_reduce"}
        split = comm_split([getattr(r, attr) for r in per_rank])
        assert 0 < split.comm_fraction < 1
    assert per_rank[0].comm_bound.grad_bytes > 20 * per_rank[0].compute_bound.grad_bytes


def test_pipeline_timelines_have_both_stages(launched):
    for m in (2, 4):
        events = [e for r in range(2) for e in launched[r][1].pipeline[m]]
        assert {e["rank"] for e in events} == {0, 1}
        assert 0 <= bubble_from_timeline(events).mean < 1
    assert bubble("1f1b", 2, 4).of_total < bubble("1f1b", 2, 2).of_total  # the formula


def _stats(spans):
    return CommStats(params=1, grad_bytes=4, rows=1, spans=spans, bytes_sent=4, calls=1, events=[])


def test_comm_split_picks_transfer_and_slowest_compute():
    a = _stats([{"compute": 1.0, "all_reduce": 0.5}, {"compute": 0.8, "all_reduce": 0.9}])
    b = _stats([{"compute": 1.2, "all_reduce": 0.3}, {"compute": 0.7, "all_reduce": 0.4}])
    got = comm_split([a, b])
    assert got.compute_s == 0.8 and got.comm_s == 0.3
    assert got.comm_fraction == pytest.approx(0.3 / 1.1)


def test_matmul_rates_structure():
    rates = matmul_rates((16, 128), min_cpu_s=0.01, repeats=2)
    assert [r.n for r in rates] == [16, 128]
    assert rates[0].flops == 2 * 16**3 and all(r.flops_per_s > 0 for r in rates)


def test_slow_loader_waits_at_least_its_delay():
    ds = SlowDataset(6, 4, SCALING_CONFIG, delay_s=0.03)
    serial = loader_experiment(ds[i] for i in range(len(ds)))
    ahead = loader_experiment(background_prefetch(ds[i] for i in range(len(ds))))
    assert serial.n == ahead.n == 5
    assert serial.wait_s >= 0.03  # every batch costs its sleep


def test_background_prefetch_keeps_order():
    assert list(background_prefetch(iter(range(10)), depth=3)) == list(range(10))


@pytest.mark.parametrize("s", [0.02, 0.1, 0.3])
def test_fit_serial_recovers_s_from_noisy_logs(s):
    logs = make_logs((2, 4, 8, 16), s, 1.0, 7, warmup_s=0.5, spikes={4: 0.3}, seed=3)
    assert fit_serial(logs) == pytest.approx(s, abs=0.01)
    exact = [StepLog(n, (9.0, s + (1 - s) / n, s + (1 - s) / n)) for n in (1, 2, 4)]
    assert fit_serial(exact) == pytest.approx(s, abs=1e-12)


def test_curve_row_states_the_fit_or_the_reason():
    from lab_utils.calc import fit_serial_fraction
    from lab_utils.experiments.lab10 import CurveFit

    ns, times = (1, 2, 4), (4.0, 2.5, 1.75)  # T(N) = 1 + 3/N: s = 1/4, ceiling 4x
    row = CurveFit("exact", ns, times, fit_serial_fraction(list(ns), list(times))).row()
    assert row["curve"] == "exact" and row["speedup N=4"] == pytest.approx(4 / 1.75)
    assert row["fitted s"] == pytest.approx(0.25) and row["ceiling 1/s"] == pytest.approx(4.0)
    assert row["R^2"] == pytest.approx(1.0) and row["no fit because"] == ""
    none = CurveFit("flat", (1, 2), (1.0, 1.0), None, "the times do not fall").row()
    assert none["fitted s"] is None and none["no fit because"] == "the times do not fall"


def test_wall_rows_one_per_run_with_the_oversubscription_note():
    from lab_utils.experiments.lab10 import RunStats, ScalingResults

    def stats(n):
        return RunStats(n=n, rows=4, tokens=4 * n * 8, step_s=0.5, cpu_s=0.25, comm_s=0.1, log_s=())

    rows = ScalingResults({"strong": {1: stats(1), 2: stats(2)}}).wall_rows(cores=1)
    assert [(r["run"], r["N"]) for r in rows] == [("strong", 1), ("strong", 2)]
    assert rows[1]["tokens/s"] == 64 / 0.5 and rows[1]["step ms"] == 500.0
    assert [r["note"] for r in rows] == ["", "more ranks than cores"]


def test_bottleneck_row_in_the_lab_units():
    from lab_utils.experiments.lab10 import CommSplit, bottleneck_row

    stats = CommStats(
        params=1000, grad_bytes=4000, rows=2, spans=[], bytes_sent=4000, calls=1, events=[]
    )
    row = bottleneck_row("mlp", stats, CommSplit(0.003, 0.001, 0.25), flop_per_byte=3.0)
    assert row == {
        "model": "mlp",
        "P": 1000,
        "ledger: MB sent per rank": 0.004,
        "FLOP per byte sent": 3.0,
        "compute ms": 3.0,
        "all-reduce ms": 1.0,
        "communication share": 0.25,
    }
