"""Quick-math drills (lab_utils/practice/drills/, lab 12): every answer equals the
calculator recomputed here from the drill's parameters; right answers pass within tolerance;
wrong ones are rejected with the explanation; every misconception is rejected AND named; input
that is not a number submits nothing and says why; seeds and ids rebuild the same drill."""

import pytest

from lab_utils.calc import (
    DEVICES,
    GB,
    MB,
    MOE_PRESETS,
    activation_bytes_per_layer,
    all_to_all_bytes_per_layer,
    amdahl_speedup,
    bubble,
    collective_time,
    cp_bytes_per_rank,
    max_params_that_fit,
    mfu,
    model_state_memory,
    moe_memory_per_rank,
    peak_in_flight,
    ring_bytes_per_rank,
    time_to_train,
    tp_layer_comm,
)
from lab_utils.practice.drills import Drill, DrillSession, Mistake, kinds, lookup_drill, make_drills
from lab_utils.practice.items import parse_answer

SEEDS = range(40)
REQUIRED = {
    "tp_bytes",
    "activations_tp",
    "mfu",
    "bubble",
    "pp_memory",
    "checkpoint_size",
    "allreduce_time",
    "training_days",
    "training_cost",
    "moe_memory",
    "moe_all_to_all",
    "long_context",
    "fp8_speedup",
    "model_state",
    "zero_memory",
    "ring_bytes",
    "amdahl",
    "max_model",
    "cp_bytes",
}


def _expected(d: Drill) -> float:
    """The answer recomputed here from calc and the drill's parameters."""
    p, k = d.params, d.kind
    if k == "model_state":
        return model_state_memory(p["n_params"], "mixed_adam").total / GB
    if k == "zero_memory":
        return model_state_memory(p["n_params"], "mixed_adam", p["zero_stage"], p["dp"]).total / GB
    if k == "max_model":
        return max_params_that_fit(p["gpu_mem_bytes"], "mixed_adam", p["zero_stage"], p["dp"]) / 1e9
    if k == "checkpoint_size":
        ms = model_state_memory(p["n_params"])
        return (ms.master + ms.optimizer) / GB
    if k == "ring_bytes":
        return ring_bytes_per_rank("all_reduce", p["n"], p["size_bytes"]) / MB
    if k == "allreduce_time":
        return 1e3 * collective_time(
            "all_reduce", p["n"], p["size_bytes"], p["alpha_s"], p["bandwidth"]
        )
    if k == "tp_bytes":
        return tp_layer_comm(p["b"], p["s"], p["h"], p["t"]).bytes_per_rank / MB
    if k == "activations_tp":
        return (
            activation_bytes_per_layer(p["s"], 1, p["h"], p["a"], p["t"], p["sp"], "selective") / MB
        )
    if k == "long_context":
        return (
            activation_bytes_per_layer(p["s"] // p["cp"], 1, p["h"], p["a"], flash_attention=True)
            / GB
        )
    if k == "cp_bytes":
        f = cp_bytes_per_rank(p["variant"], 1, p["a"], p["s"], p["h"] // p["a"], p["n"], 2)
        return (f.forward + f.backward) / GB
    if k == "moe_memory":
        return moe_memory_per_rank(MOE_PRESETS["mixtral-8x7b"], p["ep"]).total / GB
    if k == "moe_all_to_all":
        return all_to_all_bytes_per_layer(p["tokens"], p["h"], p["k"], p["ep"]).forward / MB
    if k == "bubble":
        return 100 * bubble("gpipe", p["p"], p["m"]).of_total
    if k == "pp_memory":
        if p["v"] == 1:
            return peak_in_flight("1f1b", p["p"], p["m"])
        return peak_in_flight("interleaved", p["p"], p["m"], 0, p["v"]) / peak_in_flight(
            "1f1b", p["p"], p["m"]
        )
    if k == "amdahl":
        s = amdahl_speedup(p["serial_fraction"], p["n"])
        return s if p["ask"] == "speedup" else 100 * s / p["n"]
    if k == "mfu":
        return 100 * mfu(p["n_params"], p["tokens_per_s"], p["n"], DEVICES[p["device"]].peak_flops)
    if k in ("training_days", "training_cost"):
        if "mfu" in p:
            est = time_to_train(
                p["n_params"],
                p["tokens"],
                p["n"],
                mfu=p["mfu"],
                peak_flops=DEVICES[p["device"]].peak_flops,
                price_per_gpu_hour=p.get("price", 0.0),
            )
        else:
            est = time_to_train(
                p["n_params"], p["tokens"], p["n"], p["flops_per_gpu"], p["recompute"]
            )
        return est.days if k == "training_days" else est.cost / 1e6
    if k == "fp8_speedup":
        return 1 / ((1 - p["matmul_share"]) + p["matmul_share"] / 2)
    if k == "loss_equality":  # the token-weighted mean, written out (not calc.logged_loss)
        return sum(m * c for m, c in zip(p["means"], p["counts"])) / sum(p["counts"])
    raise AssertionError(f"no expectation for {k}")


def test_every_required_kind_exists():
    assert REQUIRED <= set(kinds())


@pytest.mark.parametrize("seed", SEEDS)
def test_answers_equal_calc_and_right_answers_pass(seed):
    drills = make_drills(seed)
    assert [d.kind for d in drills] == kinds()
    for d in drills:
        assert d.answer == pytest.approx(_expected(d), rel=1e-12), d.question
        assert d.check(d.answer).accepted
        assert d.check(d.answer * (1 + 0.9 * d.tolerance)).accepted  # inside the tolerance
        assert d.check(f"{d.answer:.6g}").accepted  # typed in a text box
        assert d.check(f"{d.answer:.6g} {d.unit}").accepted  # with its unit
        assert d.id and lookup_drill(d.id) == d and str(d.id) in d.prompt


@pytest.mark.parametrize("seed", SEEDS)
def test_wrong_answers_are_rejected_with_the_explanation(seed):
    for d in make_drills(seed):
        for wrong in (d.answer * (1 + 2 * d.tolerance), d.answer * 0.5, -d.answer):
            r = d.check(wrong)
            assert r.valid and not r.accepted and not r
            assert d.explanation in r.message and "the answer is" in r.message
        assert d.mistakes, f"{d.kind} lists no misconception"
        for m in d.mistakes:  # each misconception: rejected, and named
            r = d.check(m.value)
            assert not r.accepted and "classic mistake" in r.message and m.why in r.message
            assert r.mistake == m.why


def test_known_numbers():
    """Anchor a few drills to syllabus figures, independently of calc's internals."""
    d = Drill(
        "7B?",
        model_state_memory(7e9).total / GB,
        "GB",
        0.02,
        "16 B/param",
        mistakes=(Mistake(56, "halved"),),
    )
    assert d.check(112).accepted and not d.check(56).accepted and "halved" in d.check(56).message
    assert model_state_memory(3e9).total / GB == pytest.approx(48)
    assert amdahl_speedup(0.02, 256) == pytest.approx(41.96, abs=0.01)
    assert peak_in_flight("interleaved", 4, 16, 0, 2) / peak_in_flight("1f1b", 4, 16, 0) == 1.375


@pytest.mark.parametrize(
    "bad", ["", "abc", None, float("nan"), float("inf"), [1], "48 MB", "1.2.3", True]
)
def test_non_numbers_are_rejected_without_raising_and_say_what_to_type(bad):
    d = make_drills(0, kinds=["model_state"])[0]  # unit GB
    r = d.check(bad)
    assert not r.valid and not r.accepted and r.message and "submitted" not in str(r)


def test_parse_answer_units_and_forms():
    assert parse_answer("1,200", "GB") == 1200 and parse_answer("48.5 GB", "GB") == 48.5
    assert parse_answer("42x", "x") == 42 and parse_answer("16.4 %", "%") == 16.4
    assert parse_answer("1e3", "MB") == 1000
    with pytest.raises(ValueError, match="not a number in GB"):
        parse_answer("48 MB", "GB")
    assert (
        parse_answer("$1.5M", "million USD")
        == 1.5
        == parse_answer("1.5 million USD", "million USD")
    )


@pytest.mark.parametrize(
    "kind, typed, factor",
    [
        ("max_model", "8.8e9", "1e9"),
        ("model_state", "1.12e11", "1e9"),
        ("training_cost", "1500000", "1e6"),
    ],
)
def test_a_plain_count_typed_for_a_scaled_unit_gets_a_hint_not_a_verdict(kind, typed, factor):
    """'(answer in B params)' read as a count: 8.8e9 is refused with the factor, not graded."""
    session = DrillSession(seed=0, kinds=[kind])
    r = session.submit(0, typed)
    assert not r.valid and f"divide by {factor}" in r.message and session.answered == 0


def test_seeded_reproducibility():
    assert make_drills(7) == make_drills(7)
    assert make_drills(7, n=20) == make_drills(7, n=20)
    assert make_drills(7) != make_drills(8)
    assert make_drills(7, prefix="m") != make_drills(7)
    questions = {d.question for seed in SEEDS for d in make_drills(seed)}
    assert len(questions) > 300, "the parameters should vary with the seed"


def test_kinds_count_and_bad_arguments():
    ds = make_drills(1, n=10, kinds=["amdahl", "bubble"])
    assert [d.kind for d in ds] == ["amdahl", "bubble"] * 5
    with pytest.raises(ValueError, match="unknown drill kind"):
        make_drills(0, kinds=["nope"])
    with pytest.raises(ValueError, match="not a drill id"):
        lookup_drill("drill:amdahl")
    with pytest.raises(ValueError, match="prefix"):
        make_drills(0, prefix="M1")


def test_session_answers_once_and_counts_only_valid_input():
    s = DrillSession(seed=3, n=5)
    first = s.current
    assert not s.submit(0, "abc").valid and s.answered == 0  # bad input: nothing submitted
    r = s.submit(0, first.answer)
    assert r.accepted and str(r).startswith(f"submitted [{first.id}]")
    assert s.submit(0, first.answer * 3) is r  # answered once
    assert not s.submit(1, first.answer * 99).accepted
    assert (s.correct, s.answered) == (1, 2)
    assert not s.submit(9, 1).valid and "no drill number 9" in s.submit(9, 1).message
    g = s.give_up(2)
    assert g.valid and not g.accepted and "Not answered" in g.message and s.answered == 3
    assert s.next() is s.drills[1]


def test_questions_table_shows_no_answer():
    s = DrillSession(seed=0)
    assert s.show() is None
    text = str(s.table())
    for d in s.drills:
        assert d.id in text and d.explanation not in text


def test_simulated_learner_covers_right_mistake_and_wrong():
    s = DrillSession(seed=0)
    results = [s.submit(i, v) for i, v in s.simulated_answers().items()]
    assert any(r.accepted for r in results) and any(r.mistake for r in results)
    assert any(not r.accepted and not r.mistake for r in results)
