"""The exercise mechanism: every registered exercise accepts its reference solution and
rejects each known-wrong implementation, on real ranks (one test per exercise)."""
import sys

import pytest
import torch
import torch.distributed as dist

from lab_utils import exercises
from lab_utils.exercises import Exercise, Verdict, check, check_many, compare_tensors


def test_discovery_finds_every_exercise_without_errors():
    registry = exercises.discover()
    assert not exercises.DISCOVERY_ERRORS, exercises.DISCOVERY_ERRORS
    assert "ring_all_reduce" in registry and len(registry) >= 10


# One test per exercise (not one for all): each gets the suite's per-test timeout, and the
# pytest-xdist workers share them out.
@pytest.mark.parametrize("name", sorted(exercises.discover()))
def test_every_exercise_accepts_reference_and_rejects_wrong_answers(name):
    ex = exercises.discover()[name]
    items = [(ex.name, ex.reference)] + [(ex.name, fn) for fn in ex.wrong.values()]
    labels = [(ex.name, "reference")] + [(ex.name, what) for what in ex.wrong]
    results = check_many(items)
    for (name, what), res in zip(labels, results):
        assert res.name == name
        if what == "reference":
            assert res.passed, f"{name}: the reference was rejected: {res.message}"
        else:
            assert not res.passed, f"{name}: wrong implementation {what!r} was accepted"
            assert res.message, f"{name}: {what!r} rejected without an explanation"


def test_every_grader_runs_several_configurations_and_rejects_three_wrong_versions():
    """Issue 16: each grader separates right from accidentally right in >= 2 configurations
    (a sub-group, another size, m < p, ...), listed in its module, and rejects >= 3 known-wrong
    versions (the test above runs them)."""
    for ex in exercises.discover().values():
        module = sys.modules[ex.check.__module__]
        configs = [getattr(module, n) for n in ("CONFIGS", "PARTITIONS", "CASES") if hasattr(module, n)]
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
    toy = exercises.register(Exercise(
        name="toy_sum", lab="test", summary="sum", check=_toy_check, reference=_toy_reference,
        wrong={"doubled": _toy_doubled}, world_size=2, timeout_s=30, hint="use all_reduce"))
    try:
        ok, doubled, stub = check_many([("toy_sum", toy.reference), ("toy_sum", _toy_doubled),
                                        ("toy_sum", _toy_stub)])
        assert ok.passed and ok.message == "summed"
        assert not doubled.passed and "2 x the expected" in doubled.message
        assert not stub.passed and stub.message.startswith("not implemented yet")
        raised = exercises.check_toy_sum(_toy_raises_on_rank1)  # the check_<name> shortcut
        assert not raised.passed and "boom on rank 1" in raised.message
        assert "ValueError" in raised.message
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
    ring = {0: "blocking recv from rank 3", 1: "blocking recv from rank 0",
            2: "blocking recv from rank 1", 3: "blocking recv from rank 2"}
    assert "rank 0 -> rank 3 -> rank 2 -> rank 1 -> rank 0: a cycle" in wait_cycle(ring)
    assert wait_cycle({0: "blocking recv from rank 1"}) == ""  # rank 1 is elsewhere: no cycle claimed
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


def test_show_solution_prints_reference_source(capsys):
    text = exercises.show_solution("ring_all_reduce")
    assert "def ring_all_reduce" in text and "def ring_reduce_scatter" in text
    assert "def ring_all_reduce" in capsys.readouterr().out
