"""Pipeline parallelism (lab_utils.parallel.pipeline_parallel.schedules, lab_utils.parallel.pipeline_parallel.torch_schedules) against the single-process reference.

Launches (~2 s each on this machine) bundle several experiments: real-compute gradients at p=2 and
p=4 (GPipe and 1F1B, balanced and uneven splits) with peak in-flight counts, simulated-compute
bubbles, a deadlocking order, and torch.distributed.pipelining's five schedules. The orders the
schedule functions produce are checked without any launch against lab_utils.calc.pipeline.
"""
import pytest
import torch
from torch.testing import assert_close

from lab_utils.calc.activations import in_flight_microbatches
from lab_utils.calc.pipeline import bubble, schedule
from lab_utils.exercises.onef1b_order import (_ideal_bubble, _validate, reference,
                                              wrong_no_warmup, wrong_warmup_by_stage)
from lab_utils.runtime.launch import RankFailure
from lab_utils.parallel.pipeline_parallel.schedules import SimCompute, gpipe, one_f_one_b, reference_grads, run_pipeline
from lab_utils.parallel.pipeline_parallel.torch_schedules import TORCH_SCHEDULES, replay

M = 6  # micro-batches in the gradient tests (> p, so 1F1B reaches its steady state)


class _OrderRecorder:
    """Stands in for a StageWorker: records the operations a schedule function calls."""

    def __init__(self, rank, p, m):
        self.rank, self.p, self.m, self.ops = rank, p, m, []

    def forward(self, i):
        self.ops.append(f"F{i}")

    def backward(self, i):
        self.ops.append(f"B{i}")


@pytest.mark.parametrize("fn, name", [(gpipe, "gpipe"), (one_f_one_b, "1f1b")])
@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 2), (3, 7)])
def test_schedule_order_matches_calc(fn, name, p, m):
    ideal = schedule(name, p, m)
    for s in range(p):
        rec = _OrderRecorder(s, p, m)
        fn(rec)
        assert rec.ops == list(ideal.order[s]), (name, p, m, s)
        if name == "1f1b":
            assert rec.ops == reference(s, p, m)  # the exercise's reference solution too


def _check_grads(result, ref_grads, ref_loss):
    assert set(result["grads"]) == set(ref_grads), "every parameter must live on exactly one stage"
    for n, g in ref_grads.items():
        assert_close(result["grads"][n], g, rtol=1e-5, atol=1e-6, msg=lambda s, n=n: f"{n}: {s}")
    assert result["loss"] == pytest.approx(ref_loss, rel=1e-6)


@pytest.mark.parametrize("p, balances", [(2, [None, [3, 1]]), (4, [None, [0, 2, 1, 1]])])
def test_gradients_and_in_flight_match_reference(p, balances):
    exps = [dict(schedule=s, m=M, balance=b, warmup_step=False)
            for s in ("gpipe", "1f1b") for b in balances]
    results = run_pipeline(exps, p, timeout_s=120)
    ref_loss, ref_grads = reference_grads(M)
    for exp, res in zip(exps, results):
        _check_grads(res, ref_grads, ref_loss)
        expected = [in_flight_microbatches(exp["schedule"], p, M, s) for s in range(p)]
        assert res["peak_in_flight"] == expected, exp  # GPipe m everywhere; 1F1B p - s
        assert res["overran"] == 0  # real compute: no simulated time to overrun
    one_f1b = results[len(balances)]  # 1F1B, balanced: stage 0 holds the most activations
    assert one_f1b["peak_bytes"][0] == max(one_f1b["peak_bytes"])
    assert results[0]["peak_bytes"][0] > one_f1b["peak_bytes"][0]  # GPipe holds more than 1F1B


def test_simulated_bubble_same_for_gpipe_and_1f1b():
    p, m = 4, 8
    exps = [dict(schedule=s, m=m, sim=SimCompute(t_f=0.03)) for s in ("gpipe", "1f1b")]
    results = run_pipeline(exps, p, timeout_s=120)
    predicted = bubble("1f1b", p, m).of_total  # (p-1)/(m+p-1)
    measured = [r["bubble"].mean for r in results]
    for r, b in zip(results, measured):
        assert abs(b - predicted) < 0.1, (r["schedule"], b, predicted)
        spans = [e["end"] - e["start"] for e in r["events"] if e["name"] == "F"]
        assert min(spans) >= 0.03 - 1e-3  # every forward padded to t_f
    assert abs(measured[0] - measured[1]) < 0.1  # 1F1B does NOT shrink the bubble
    assert [r["peak_in_flight"] for r in results] == [[m] * p, [4, 3, 2, 1]]


def test_wrong_order_deadlock_is_reported():
    with pytest.raises(RankFailure, match=r"waited 1 s for the (gradient|activation)"):
        run_pipeline([dict(order=wrong_warmup_by_stage, m=4, deadlock_after_s=1.0,
                           warmup_step=False)], 2, timeout_s=60)


def test_exercise_helpers_without_launch():
    p, m = 4, 8
    assert _validate([reference(s, p, m) for s in range(p)], p, m) is None
    assert "appears twice" in _validate([["F0", "F0"]] * p, p, m)
    assert "comes before" in _validate([["B0", "F0"]] * p, p, m)
    assert "missing" in _validate([reference(s, p, m)[:-1] for s in range(p)], p, m)
    assert _ideal_bubble([reference(s, p, m) for s in range(p)], p) == pytest.approx(3 / 11)
    assert _ideal_bubble([wrong_no_warmup(s, p, m) for s in range(p)], p) == pytest.approx(0.75)
    assert _ideal_bubble([wrong_warmup_by_stage(s, p, m) for s in range(p)], p) == 1.0


def test_torch_schedules_match_reference():
    from lab_utils.parallel.pipeline_parallel.torch_schedules import TORCH_CONFIG, run_torch_pipeline

    # p = 2 ranks (4 stages with v = 2): every rank imports torch.distributed.pipelining (~6 s of
    # CPU each, dynamo and DTensor), so fewer ranks on 2 cores is a much shorter test.
    p, m = 2, 4
    exps = [dict(schedule=name, m=m) for name in TORCH_SCHEDULES]
    results = run_torch_pipeline(exps, p, timeout_s=180)
    ref_loss, ref_grads = reference_grads(m, cfg=TORCH_CONFIG)
    for res in results:
        assert res["loss"] == pytest.approx(ref_loss, rel=1e-5), res["schedule"]
        assert set(res["grads"]) == set(ref_grads)
        for n, g in ref_grads.items():
            assert_close(res["grads"][n], g, rtol=1e-4, atol=1e-6)
        kinds = {e["name"] for e in res["events"]}
        assert kinds == {"F", "B", "W"}, res["schedule"]
        v = TORCH_SCHEDULES[res["schedule"]][1]
        assert len([e for e in res["events"] if e["name"] == "F"]) == p * v * m
        assert res["replayed"] is not None  # torch's recorded order re-times without deadlock


@pytest.mark.parametrize("name, p, m", [("gpipe", 4, 4), ("1f1b", 4, 8), ("zb-h1", 4, 8),
                                        ("zb-h1", 3, 6), ("interleaved", 2, 4)])
def test_replay_reproduces_calc_schedules(name, p, m):
    v = 2 if name == "interleaved" else 1
    ideal = schedule(name, p, m, v)
    events = [dict(rank=e.rank, name=e.kind, mb=e.microbatch, stage=e.chunk * p + e.rank,
                   start=e.start) for e in ideal.events]
    again = replay(events, 1.0, 2.0, 1.0, v, split=name == "zb-h1")
    assert max(e["end"] for e in again) == pytest.approx(ideal.makespan)
    assert replay([dict(rank=0, name="B", mb=0, stage=0, start=0),
                   dict(rank=0, name="F", mb=0, stage=0, start=1)]) is None  # B before F


def test_sim_times_and_reference():
    assert SimCompute(0.01).times(0) == (0.01, 0.02)
    assert SimCompute(0.01, stage_cost=(2.0, 1.0)).times(0) == (0.02, 0.04)
    loss, grads = reference_grads(2)
    assert torch.isfinite(torch.tensor(loss)) and all(g.abs().sum() > 0 for g in grads.values())
