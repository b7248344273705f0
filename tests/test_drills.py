"""Quick-math drills (lab_utils/practice/drills.py, lab 12): answers come from calc, checks accept the
right answer within tolerance and reject wrong ones with the explanation, seeds reproduce."""
import pytest

from lab_utils.calc import (DEVICES, GB, MB, amdahl_speedup, bubble, flops_per_token,
                            max_params_that_fit, model_state_memory, ring_bytes_per_rank)
from lab_utils.practice.drills import GENERATORS, Drill, DrillSession, drill_widget, make_drills

SEEDS = range(40)


def _expected(d: Drill) -> float:
    """The answer recomputed here from calc and the drill's parameters."""
    p = d.params
    if d.kind == "model_state":
        return model_state_memory(p["n_params"], "mixed_adam").total / GB
    if d.kind == "zero_memory":
        return model_state_memory(p["n_params"], "mixed_adam", p["zero_stage"], p["dp"]).total / GB
    if d.kind == "ring_bytes":
        return ring_bytes_per_rank("all_reduce", p["n"], p["size_bytes"]) / MB
    if d.kind == "bubble":
        return 100 * bubble("gpipe", p["p"], p["m"]).of_total
    if d.kind == "amdahl":
        return amdahl_speedup(p["serial_fraction"], p["n"])
    if d.kind == "max_model":
        return max_params_that_fit(p["gpu_mem_bytes"], "mixed_adam", p["zero_stage"], p["dp"]) / 1e9
    if d.kind == "training_days":
        return (flops_per_token(p["n_params"]) * p["tokens"]
                / (p["n"] * DEVICES[p["device"]].peak_flops * p["mfu"]) / 86400)
    raise AssertionError(f"no expectation for {d.kind}")


@pytest.mark.parametrize("seed", SEEDS)
def test_answers_equal_calc_and_right_answers_pass(seed):
    drills = make_drills(seed)
    assert [d.kind for d in drills] == list(GENERATORS)
    for d in drills:
        assert d.answer == pytest.approx(_expected(d), rel=1e-12), d.question
        assert d.check(d.answer).accepted
        assert d.check(d.answer * (1 + 0.9 * d.tolerance)).accepted  # inside the tolerance
        assert d.check(f"{d.answer:.6g}").accepted                    # typed in a text box


@pytest.mark.parametrize("seed", SEEDS)
def test_wrong_answers_are_rejected_with_the_explanation(seed):
    for d in make_drills(seed):
        for wrong in (d.answer * (1 + 2 * d.tolerance), d.answer * 0.5, 0, -d.answer):
            r = d.check(wrong)
            assert not r.accepted and not r
            assert d.explanation in r.message and "expected" in r.message
        r = d.check(d.mistake)          # the misconception: rejected, and named
        assert not r.accepted and "classic mistake" in r.message and d.mistake_why in r.message


def test_known_numbers():
    """Anchor a few drills to the syllabus figures, independently of calc."""
    d = Drill("7B?", model_state_memory(7e9).total / GB, "GB", 0.02, "16 B/param")
    assert d.check(112).accepted and not d.check(56).accepted
    assert model_state_memory(3e9).total / GB == pytest.approx(48)
    assert amdahl_speedup(0.05, 10**9) == pytest.approx(20, rel=1e-6)


@pytest.mark.parametrize("bad", ["", "abc", None, float("nan"), float("inf"), [1]])
def test_non_numbers_are_rejected_without_raising(bad):
    d = make_drills(0)[0]
    r = d.check(bad)
    assert not r.accepted and r.message


def test_seeded_reproducibility():
    assert make_drills(7) == make_drills(7)
    assert make_drills(7, n=20) == make_drills(7, n=20)
    assert make_drills(7) != make_drills(8)
    questions = {d.question for seed in SEEDS for d in make_drills(seed)}
    assert len(questions) > 100, "the parameters should vary with the seed"


def test_kinds_and_count():
    ds = make_drills(1, n=10, kinds=["amdahl", "bubble"])
    assert [d.kind for d in ds] == ["amdahl", "bubble"] * 5
    with pytest.raises(ValueError, match="unknown drill kind"):
        make_drills(0, kinds=["nope"])


def test_session_and_widget_state():
    s = DrillSession(seed=3, n=5)
    first = s.current
    assert s.submit(first.answer).accepted and not s.submit(first.answer * 3).accepted
    assert (s.correct, s.answered) == (1, 2)
    assert s.next() is s.drills[1] and s.last is None
    ui = drill_widget(seed=3)
    assert ui.session.current == first
    assert ui.session.current.question.split("?")[0] in ui.children[1].value
