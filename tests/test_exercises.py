"""The exercise mechanism: every registered exercise accepts its reference solution and
rejects each known-wrong implementation, on real ranks (one test per exercise)."""

import dataclasses
import sys
from pathlib import Path

import cloudpickle
import pytest
import torch
import torch.distributed as dist

from lab_utils import exercises
from lab_utils.exercises import Exercise, Verdict, check, check_many, compare_tensors

sys.path.insert(0, str(Path(__file__).parent))
import exercise_variants as variants  # noqa: E402 - beside this file

cloudpickle.register_pickle_by_value(variants)  # the ranks need not import tests/


def test_discovery_finds_every_exercise_without_errors():
    registry = exercises.discover()
    assert not exercises.DISCOVERY_ERRORS, exercises.DISCOVERY_ERRORS
    assert "ring_all_reduce" in registry and len(registry) >= 10


# One test per exercise (not one for all): each gets the suite's per-test timeout, and the
# pytest-xdist workers share them out. Every version of one exercise runs in ONE launch.
@pytest.mark.parametrize("name", sorted(exercises.discover()))
def test_every_exercise_names_each_mistake_and_accepts_unusual_right_answers(name):
    """Issue 37: every known-wrong version (the module's and the learner-like ones of
    tests/exercise_variants.py) is rejected with a message that names ITS misconception, and
    the reference and >= 2 correct-but-unusual versions pass."""
    ex = exercises.discover()[name]
    said = variants.MODULE_WRONG[name]
    assert set(said) == set(ex.wrong), f"{name}: give each registered wrong version its phrase"
    wrong = [(what, fn, said[what]) for what, fn in ex.wrong.items()]
    wrong += [(fn.__name__, fn, phrase) for fn, phrase in variants.WRONG.get(name, ())]
    right = [("reference", ex.reference)] + [(fn.__name__, fn) for fn in variants.RIGHT[name]]
    assert len(wrong) + len(variants.RAISING.get(name, ())) >= 4 and len(right) >= 3
    results = check_many([(name, fn) for _, fn in right] + [(name, fn) for _, fn, _ in wrong])
    problems = [
        f"{what} was rejected: {res.message}"
        for (what, _), res in zip(right, results)
        if not res.passed
    ]
    for (what, _, phrase), res in zip(wrong, results[len(right) :]):
        assert res.name == name
        if res.passed:
            problems.append(f"wrong version {what!r} was accepted")
        elif phrase not in res.message:
            problems.append(f"{what!r}: the message does not say {phrase!r}: {res.message}")
    assert not problems, f"{name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", sorted(variants.RAISING))
def test_a_version_that_raises_or_hangs_is_told_its_mistake_in_one_plain_line(name):
    """A wrong group or a hang in the learner's code: the grader names it, without a torch
    traceback or an absolute path (each such launch fails, so they run apart)."""
    for fn, phrase in variants.RAISING[name]:
        res = check_many([(name, fn)])[0]
        assert not res.passed and phrase in res.message, (fn.__name__, res.message)
        assert "Traceback" not in res.message and "/lab_utils/" not in res.message, res.message


def test_every_grader_runs_several_configurations_and_rejects_three_wrong_versions():
    """Issue 16: each grader separates right from accidentally right in >= 2 configurations
    (a sub-group, another size, m < p, ...), listed in its module, and rejects >= 3 known-wrong
    versions (the test above runs them)."""
    for ex in exercises.discover().values():
        module = sys.modules[ex.check.__module__]
        configs = [
            getattr(module, n) for n in ("CONFIGS", "PARTITIONS", "CASES") if hasattr(module, n)
        ]
        assert configs and len(configs[0]) >= 2, f"{ex.name}: one configuration only"
        assert len(ex.wrong) >= 3, f"{ex.name}: {len(ex.wrong)} wrong versions, want >= 3"


# ------------------------------------------------ the mechanism itself, on a toy exercise
def _toy_check(ctx, fn):
    x = torch.tensor([1.0, 2.0]) * (ctx.rank + 1)
    expected = x.clone()
    dist.all_reduce(expected, group=ctx.group)
    problem = compare_tensors(fn(x.clone(), ctx.group), expected, unchanged=x)
    return Verdict.fail(problem) if problem else Verdict.ok("summed")


def _toy_reference(t, group):
    dist.all_reduce(t, group=group)
    return t


def _toy_doubled(t, group):
    dist.all_reduce(t, group=group)
    return t * 2


def _toy_stub(t, group):
    raise NotImplementedError


def _toy_raises_on_rank1(t, group):
    if dist.get_rank(group) == 1:
        raise ValueError("boom on rank 1")
    dist.all_reduce(t, group=group)
    return t


def _toy_deadlock(t, group):
    other = 1 - dist.get_rank(group)
    dist.recv(t, other, group=group)  # both ranks wait to receive: nobody sends
    return t


def test_check_reports_wrong_stub_exception_and_deadlock_without_raising(capsys):
    toy = exercises.register(
        Exercise(
            name="toy_sum",
            lab="test",
            summary="sum",
            check=_toy_check,
            reference=_toy_reference,
            wrong={"doubled": _toy_doubled},
            world_size=2,
            timeout_s=30,
            hint="use all_reduce",
        )
    )
    try:
        ok, doubled, stub = check_many(
            [("toy_sum", toy.reference), ("toy_sum", _toy_doubled), ("toy_sum", _toy_stub)]
        )
        assert ok.passed and ok.message == "summed"
        assert not doubled.passed and "2 x the expected" in doubled.message
        assert not stub.passed and stub.message.startswith("not implemented yet")
        raised = exercises.check_toy_sum(_toy_raises_on_rank1)  # the check_<name> shortcut
        assert not raised.passed and "boom on rank 1" in raised.message
        assert "ValueError" in raised.message
        # the deadlock waits out the exercise's whole deadline: a short one, now that the same
        # two warm ranks have run the checks above (30 s cost half a minute of the suite)
        exercises._core._REGISTRY["toy_sum"] = dataclasses.replace(toy, timeout_s=10)
        stuck = check("toy_sum", _toy_deadlock)
        assert not stuck.passed and "stuck" in stuck.message
        assert "<- blocking recv from rank 1" in stuck.message  # who each rank waited for
        assert "rank 0 -> rank 1 -> rank 0: a cycle" in stuck.message
        printed = capsys.readouterr().out
        assert "[NOT YET] toy_sum" in printed and "hint: use all_reduce" in printed
    finally:
        exercises._core._REGISTRY.pop("toy_sum", None)


def test_wait_cycle_is_named_only_when_the_blocked_calls_form_one():
    from lab_utils.runtime.engine.forensics import wait_cycle

    ring = {
        0: "blocking recv from rank 3",
        1: "blocking recv from rank 0",
        2: "blocking recv from rank 1",
        3: "blocking recv from rank 2",
    }
    assert "rank 0 -> rank 3 -> rank 2 -> rank 1 -> rank 0: a cycle" in wait_cycle(ring)
    assert (
        wait_cycle({0: "blocking recv from rank 1"}) == ""
    )  # rank 1 is elsewhere: no cycle claimed
    assert wait_cycle({0: "blocking recv from any rank", 1: "blocking send to rank 0"}) == ""


def test_compare_tensors_explains_differences():
    e = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert compare_tensors(e.clone(), e) is None
    assert "None" in compare_tensors(None, e)
    assert "shape" in compare_tensors(e[:3], e)
    assert "0.25 x" in compare_tensors(e / 4, e)
    assert "still equal to the input" in compare_tensors(e * 0, e, unchanged=e * 0)
    partial = e.clone()
    partial[2] = 0
    assert "25% of the result's elements differ (first at index (2,)" in compare_tensors(partial, e)


def test_show_solution_prints_reference_source_once_without_a_path(capsys):
    text = exercises.show_solution("ring_all_reduce")
    assert "def ring_all_reduce" in text and "def ring_reduce_scatter" in text
    printed = capsys.readouterr().out
    assert "def ring_all_reduce" in printed and "/" not in printed.splitlines()[0]
    shown = []  # IPython's pretty printer: the returned text adds nothing to the printed one
    text._repr_pretty_(type("P", (), {"text": lambda self, t: shown.append(t)})(), False)
    assert not shown
    exercises.show_solution("zero1_step")  # its op=AVG is a name the notebook lacks
    assert "from lab_utils.parallel.zero import AVG\n" in capsys.readouterr().out


def test_check_many_marks_the_reference_verdict_and_prints_hints(capsys):
    ex = exercises.get("fit_serial_fraction")  # one rank: cheap
    check_many([(ex.name, ex.reference), (ex.name, next(iter(ex.wrong.values())))], verbose=True)
    out = capsys.readouterr().out
    assert f"[PASSED] {ex.name} (the REFERENCE solution, not yours)" in out
    assert f"[NOT YET] {ex.name}: " in out and f"hint: {ex.hint}" in out
