"""Pipeline bubbles: closed forms, simulated schedules, measured timelines (lab 07)."""

import pytest

from lab_utils.calc import Event, bubble, bubble_from_timeline, schedule

CASES = [(2, 4), (4, 8), (4, 4), (8, 16), (3, 7), (4, 2), (4, 1)]


def test_bubble_closed_forms():
    g = bubble("gpipe", 4, 8)
    assert (g.of_ideal, g.of_total) == pytest.approx((3 / 8, 3 / 11))
    assert (bubble("1f1b", 4, 8).of_ideal, bubble("1f1b", 4, 8).of_total) == (
        g.of_ideal,
        g.of_total,
    )  # same bubble as GPipe
    i = bubble("interleaved", 4, 8, v=2)
    assert (i.of_ideal, i.of_total) == pytest.approx((3 / 16, 3 / 19))
    for b in (g, i, bubble("zb-h1", 4, 8)):
        assert b.of_total == pytest.approx(b.of_ideal / (1 + b.of_ideal))


def test_zero_bubble_closed_forms():
    # Equal F, B (input grad), W times: ZB-H1 idles 1/3 of 1F1B, ZB-H2 not at all.
    assert bubble("zb-h1", 8, 32).of_ideal == pytest.approx(bubble("1f1b", 8, 32).of_ideal / 3)
    assert bubble("zb-h2", 8, 32).of_ideal == 0
    # Unequal times follow (p-1)(T_F + T_B - T_W) with T_B = t_b - t_w.
    zb = bubble("zb-h1", 4, 8, t_f=1.0, t_b=2.5, t_w=0.5)
    assert zb.of_ideal == pytest.approx(3 * (1 + 2.0 - 0.5) / (8 * 3.5))


@pytest.mark.parametrize("p, m", CASES)
def test_simulated_gpipe_and_1f1b_bubble_is_exact(p, m):
    want = (p - 1) / (m + p - 1)
    for name in ("gpipe", "1f1b"):
        s = schedule(name, p, m, t_f=1.0, t_b=2.0)
        meas = bubble_from_timeline(s.events)
        assert all(v == pytest.approx(want, abs=1e-12) for v in meas.per_rank.values())
        assert s.makespan == pytest.approx((m + p - 1) * 3.0)
        assert meas.mean == pytest.approx(bubble(name, p, m).of_total)


@pytest.mark.parametrize("p, m", CASES)
def test_in_flight_gpipe_m_1f1b_at_most_p(p, m):
    assert schedule("gpipe", p, m).peak_in_flight == tuple([m] * p)
    peaks = schedule("1f1b", p, m).peak_in_flight
    assert peaks == tuple(min(p - s, m) for s in range(p))
    assert max(peaks) <= p


def test_1f1b_order():
    s = schedule("1f1b", 4, 8)
    assert " ".join(s.order[0]) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"
    assert " ".join(s.order[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"
    assert " ".join(schedule("gpipe", 2, 3).order[1]) == "F0 F1 F2 B0 B1 B2"


@pytest.mark.parametrize("p, m, v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (4, 4, 2), (8, 16, 2)])
def test_interleaved_simulation_matches_formula(p, m, v):
    s = schedule("interleaved", p, m, v)
    meas = bubble_from_timeline(s.events)
    assert meas.max == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-12)
    assert meas.mean == pytest.approx(bubble("interleaved", p, m, v).of_total)
    assert s.order[0][0] == "F0c0" and s.order[0][p] == "F0c1"  # group of p, then chunk 1


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 4), (8, 16), (3, 7)])
def test_zb_h1_simulation(p, m):
    s = schedule("zb-h1", p, m, t_f=1.0, t_b=2.0, t_w=1.0)
    meas = bubble_from_timeline(s.events)
    assert meas.max == pytest.approx(bubble("zb-h1", p, m).of_total, abs=1e-12)
    # idle time is one third of 1F1B's: (p-1) vs 3(p-1) time units
    assert meas.max * s.makespan == pytest.approx((p - 1) * 1.0)
    assert max(s.peak_in_flight) <= p  # 1F1B's memory
    assert sum(e.kind == "W" for e in s.events) == p * m


@pytest.mark.parametrize("name, v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)])
def test_schedules_respect_dependencies(name, v):
    p, m = 4, 8
    s = schedule(name, p, m, v)
    end = {(e.kind, e.microbatch, e.chunk * p + e.rank): e.end for e in s.events}
    for e in s.events:
        vs, last = e.chunk * p + e.rank, p * v - 1
        if e.kind == "F" and vs > 0:
            assert e.start >= end[("F", e.microbatch, vs - 1)] - 1e-12
        if e.kind == "B":
            dep = ("B", e.microbatch, vs + 1) if vs < last else ("F", e.microbatch, vs)
            assert e.start >= end[dep] - 1e-12
        if e.kind == "W":
            assert e.start >= end[("B", e.microbatch, vs)] - 1e-12
    for r in range(p):  # one operation at a time per rank, m*v forwards each
        mine = sorted((e for e in s.events if e.rank == r), key=lambda e: e.start)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(mine, mine[1:]))
        assert sum(e.kind == "F" for e in mine) == m * v


def test_bubble_from_measured_timeline_dicts():
    # Two ranks over [0, 10]: rank 0 busy 0-4 and 3-6 (overlap merged -> 6), rank 1 busy 5-10.
    ev = [
        {"rank": 0, "start": 0, "end": 4},
        {"rank": 0, "start": 3, "end": 6},
        {"rank": 1, "start": 5, "end": 10},
    ]
    g = bubble_from_timeline(ev)
    assert g.per_rank == pytest.approx({0: 0.4, 1: 0.5}) and g.makespan == 10
    r = bubble_from_timeline(ev, window="rank")
    assert r.per_rank == pytest.approx({0: 0.0, 1: 0.0})
    obj = bubble_from_timeline([Event(0, "F", 0, 0, 0.0, 1.0), Event(1, "F", 0, 0, 1.0, 2.0)])
    assert obj.mean == pytest.approx(0.5)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: bubble("interleaved", 4, 6, v=2), "multiple of p=4.*use m = 8"),
        (lambda: schedule("interleaved", 4, 6, v=2), "multiple of p=4"),
        (lambda: bubble("interleaved", 4, 8, v=1), "needs v >= 2"),
        (lambda: schedule("1f1b", 4, 8, v=2), "only applies to the 'interleaved'"),
        (lambda: bubble("dualpipe", 4, 8), "schedule must be one of"),
        (lambda: schedule("zb-h2", 4, 8), "name must be one of"),
        (lambda: bubble("zb-h1", 4, 8, t_b=2.0, t_w=2.0), "t_w=2.0 must be smaller than t_b"),
        (lambda: schedule("1f1b", 0, 8), "p must be a whole number >= 1"),
        (lambda: schedule("1f1b", 2, 2, t_f=0), "t_f must be a positive number"),
        (lambda: bubble_from_timeline([]), "timeline is empty"),
        (lambda: bubble_from_timeline([{"rank": 0, "start": 0}]), "no 'end' key"),
        (lambda: bubble_from_timeline([object()]), "no attribute 'rank'"),
        (
            lambda: bubble_from_timeline([{"rank": 0, "start": 2, "end": 1}]),
            "ends before it starts",
        ),
        (lambda: bubble_from_timeline([{"rank": 0, "start": 1, "end": 1}]), "zero length"),
        (lambda: bubble_from_timeline([{"rank": 0, "start": 0, "end": 1}], "wall"), "window must"),
    ],
)
def test_pipeline_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- peak in-flight micro-batches and bubble of all six schedules (issue 21) ------------
from lab_utils.calc import SCHEDULES, p2p_factor, peak_in_flight, pipeline_facts  # noqa: E402


@pytest.mark.parametrize("p, m", CASES)
def test_peak_in_flight_closed_form_equals_simulation(p, m):
    # GPipe m, 1F1B min(p-s, m), ZB-H1 min(p, m) on every stage (W deferred; Qi et al. 2023).
    for name in ("gpipe", "1f1b"):
        sim = schedule(name, p, m).peak_in_flight
        assert tuple(peak_in_flight(name, p, m, s) for s in range(p)) == sim
    sim = schedule("zb-h1", p, m, t_f=1.0, t_b=2.0, t_w=1.0).peak_in_flight
    assert tuple(peak_in_flight("zb-h1", p, m, s) for s in range(p)) == sim


@pytest.mark.parametrize(
    "p, m, v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (4, 4, 2), (8, 16, 2), (4, 12, 3)]
)
def test_interleaved_peak_equals_simulation(p, m, v):
    sim = schedule("interleaved", p, m, v).peak_in_flight  # in chunks of 1/v stage
    assert tuple(peak_in_flight("interleaved", p, m, s, v) * v for s in range(p)) == sim
    if m > p:  # Korthikanti et al. 2022 Sec. 4: the first stage holds p (1 + (p-1)/(p v))
        assert peak_in_flight("interleaved", p, m, 0, v) == pytest.approx(
            p * (1 + (p - 1) / (p * v))
        )


def test_zero_bubble_schedules_qi_et_al_2023():
    # Qi et al. 2023 (ZB-H1, ZB-H2: Sec. 2 and Table 2; ZB-V: the authors' comparison at
    # T_F = T_B = T_W): bubble (p-1)/m, (p-1)/(3m), 0, 0; activation memory 1x, 1x, 2x, 1x
    # of 1F1B (p, p, 2p-1, p micro-batches on the busiest stage); p2p traffic 2x for ZB-V.
    p, m = 8, 32
    eq = dict(t_f=1.0, t_b=2.0, t_w=1.0)
    rows = {
        name: pipeline_facts(name, p, m, **({} if name in ("1f1b", "gpipe") else eq))
        for name in ("1f1b", "zb-h1", "zb-h2", "zb-v")
    }
    assert rows["1f1b"].bubble.of_ideal == pytest.approx((p - 1) / m)
    assert rows["zb-h1"].bubble.of_ideal == pytest.approx((p - 1) / (3 * m))
    assert rows["zb-h2"].bubble.of_ideal == 0 and rows["zb-v"].bubble.of_ideal == 0
    assert [rows[k].peak for k in ("1f1b", "zb-h1", "zb-h2", "zb-v")] == [p, p, 2 * p - 1, p]
    assert rows["zb-h2"].peak_per_stage == tuple(float(2 * (p - s) - 1) for s in range(p))
    assert rows["zb-v"].peak_per_stage == (float(p),) * p  # balanced over workers
    assert [rows[k].p2p_factor for k in ("1f1b", "zb-h1", "zb-h2", "zb-v")] == [1, 1, 1, 2]
    assert p2p_factor("interleaved", v=4) == 4  # v p - 1 chunk boundaries
    assert set(SCHEDULES) == {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"}


def test_peak_in_flight_with_few_microbatches():
    assert [peak_in_flight("zb-h2", 4, 2, s) for s in range(4)] == [2, 2, 2, 1]
    assert peak_in_flight("gpipe", 4, 2, 3) == 2 and peak_in_flight("zb-v", 4, 2) == 2
