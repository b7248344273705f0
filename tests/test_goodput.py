"""The goodput model of lab 11 (lab_utils/calc/goodput.py) and its widget: pure."""

import math

import pytest

from lab_utils.calc import goodput as gp
from lab_utils.viz import goodput_explorer as gx

M = gp.LLAMA3_405B.mtbf_s


def test_llama3_record():
    rec = gp.LLAMA3_405B
    assert (rec.days, rec.interruptions, rec.unexpected, rec.gpus) == (54, 466, 419, 16384)
    assert M / 3600 == pytest.approx(3.093, abs=1e-3)  # 54 x 24 / 419 hours


def test_young_and_daly_intervals():
    assert gp.young_interval(60, 3 * 3600) == pytest.approx(math.sqrt(2 * 60 * 10800))
    # Daly's correction is small when the stall is small against the MTBF ...
    assert gp.daly_interval(5, M) == pytest.approx(gp.young_interval(5, M), rel=0.02)
    # ... and the interval is the MTBF itself once the stall reaches 2M (Daly 2006, eq. 37)
    assert gp.daly_interval(3 * M, M) == M


def test_daly_interval_maximises_the_exact_goodput():
    for delta, restart in ((30, 300), (300, 1800)):
        best = gp.daly_interval(delta, M)
        g = gp.expected_goodput(best, delta, restart, M)
        assert g >= gp.expected_goodput(best * 0.8, delta, restart, M)
        assert g >= gp.expected_goodput(best * 1.25, delta, restart, M)


def test_first_order_is_the_expansion_of_the_exact_model():
    for tau, delta, restart in ((600, 10, 60), (900, 30, 300)):
        exact, first = (
            gp.expected_goodput(tau, delta, restart, M),
            gp.goodput_first_order(tau, delta, restart, M),
        )
        assert first < exact and exact - first < 0.02
        w = gp.waste(tau, delta, restart, M)
        assert 1 - w.total == pytest.approx(first)


@pytest.mark.parametrize(
    "delta,restart,tau", [(30, 300, None), (30, 300, 3600.0), (60, 600, None), (5, 120, 300.0)]
)
def test_simulation_agrees_with_the_model_within_5_percent(delta, restart, tau):
    tau = tau or gp.daly_interval(delta, M)
    sim = gp.simulate(tau, delta, restart, M, horizon=54 * gp.DAY, seed=0)
    assert sim.failures > 300  # ~419 failures injected
    assert sim.goodput == pytest.approx(gp.expected_goodput(tau, delta, restart, M), rel=0.05)
    # the wall time is fully accounted for
    parts = sim.useful_s + sim.lost_s + sim.restart_s + sim.checkpoint_s
    assert parts == pytest.approx(sim.wall_s, rel=1e-9)


def test_simulation_without_failures_pays_only_the_stalls():
    sim = gp.simulate(100.0, 10.0, 60.0, mtbf=1e15, horizon=1100.0, seed=1)
    assert sim.failures == 0 and sim.checkpoints == 10
    assert sim.goodput == pytest.approx(100 / 110)


@pytest.mark.parametrize(
    "args,field",
    [
        ((0, 1, 1, 1), "tau"),
        ((1, -1, 1, 1), "delta"),
        ((1, 1, float("nan"), 1), "restart"),
        ((1, 1, 1, True), "mtbf"),
        ((1, 1, 1, "3h"), "mtbf"),
    ],
)
def test_bad_inputs_raise_a_value_error_naming_the_field(args, field):
    with pytest.raises(ValueError, match=f"^{field} "):
        gp.expected_goodput(*args)
    with pytest.raises(ValueError, match="^horizon "):
        gp.simulate(1, 1, 1, 1, horizon=-1.0)


def test_widget_validates_and_defaults_to_the_daly_optimum():
    state = gx.validate({"mtbf_h": 3.09, "stall_s": 30.0, "restart_min": 5.0, "interval_min": 0.0})
    assert not state.chosen and state.interval_s == pytest.approx(gp.daly_interval(30, 3.09 * 3600))
    spec = gx.figure_spec(state)
    assert len(spec["data"]) == 4 and "goodput" in gx.summary_html(state)
    with pytest.raises(ValueError, match="mean time between failures"):
        gx.validate({"mtbf_h": -1.0, "stall_s": 30.0, "restart_min": 5.0, "interval_min": 0.0})
    w = gx.goodput_explorer()
    w.set(stall_s=float("nan"))
    assert "checkpoint stall" in w.error_message


def test_replica_groups_lose_a_gth_of_the_recovery():
    """By hand: 8 groups, 60 s recovery, 5 s steps, a failure every 3 h: 65 / (8 x 10800) lost;
    against a job-wide restart from a checkpoint the waste is much larger."""
    from lab_utils.calc import expected_goodput, replica_group_goodput

    got = replica_group_goodput(8, 60.0, 5.0, 3 * 3600.0)
    assert got == pytest.approx(1 - 65 / (8 * 10800))
    assert got > expected_goodput(1800.0, 60.0, 600.0, 3 * 3600.0) + 0.1
    assert replica_group_goodput(1, 1e9, 5.0, 1.0) == 0.0
    with pytest.raises(ValueError, match="groups"):
        replica_group_goodput(0, 60.0, 5.0, 3600.0)
