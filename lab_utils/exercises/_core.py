"""The exercise mechanism: register an exercise, check a learner's function ON REAL RANKS.

A learner writes a function in a notebook cell; ``check("<name>", fn)`` (or the shortcut
``check_<name>(fn)``) launches ``world_size`` ranks with ``lab_utils.run``, runs the exercise's
check on every rank with the learner's ``fn``, and prints and returns a ``CheckResult``. It
never raises for a wrong answer: a wrong value, an exception in the learner's code (its
traceback is shown), a deadlock (the stuck ranks are named) and a stub that raises
``NotImplementedError`` ("not implemented yet") all come back as ``passed=False``.

HOW TO WRITE AN EXERCISE MODULE (one file per exercise in ``lab_utils/exercises/``; every
module whose name does not start with ``_`` is imported automatically when an exercise is
first looked up, so adding the file is all it takes):

    # lab_utils/exercises/my_allgather.py
    import torch, torch.distributed as dist
    from lab_utils.exercises._core import Exercise, Verdict, compare_tensors, register

    def reference(tensor, group):                 # the solution; show_solution() prints it
        out = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
        dist.all_gather(out, tensor, group=group)
        return torch.cat(out)

    def wrong_own_only(tensor, group):            # a known-wrong answer CI must reject
        return tensor.repeat(dist.get_world_size(group))

    def check(ctx, fn):                           # runs on EVERY rank, fn = learner's code
        x = torch.arange(4.0) + 10 * ctx.rank     # rank-dependent input: (4,)
        got = fn(x.clone(), ctx.group)
        problem = compare_tensors(got, reference(x.clone(), ctx.group), what="gathered tensor")
        return Verdict.fail(problem) if problem else Verdict.ok("all ranks hold every shard")

    register(Exercise(
        name="my_allgather", lab="03_collectives",
        summary="gather every rank's tensor into one, in rank order",
        signature="fn(tensor, group) -> torch.Tensor (world_size * len(tensor),)",
        check=check, reference=reference, wrong={"own shard repeated": wrong_own_only},
        world_size=4))

The contract, field by field (``Exercise``):
  * ``check(ctx, fn) -> Verdict`` runs on every rank (ctx: rank, world_size, group, device,
    ...). It calls ``fn`` with inputs it builds, compares with the reference (computed in the
    same rank, or with torch's own collective) and returns ``Verdict.ok(msg, **details)`` or
    ``Verdict.fail(msg, **details)``; the message should say WHAT differs and a likely why
    (``compare_tensors`` does most of that). Every rank must make the same collective calls
    in the same order, or the launch deadlocks. A check may use ``lab_utils.measure.CommLedger``
    to require a communication pattern (e.g. "only send/recv, 2(N-1)/N x D bytes").
    Details must be picklable (plain values).
  * ``reference``: a callable with the learner's signature; ``show_solution(name)`` prints its
    source (plus ``solution_helpers``' sources). It lives wherever it belongs (e.g. the
    from-scratch library module) and the exercise points at it.
  * ``wrong``: ``{description: callable}``, at least one; ``tests/test_exercises.py`` checks
    that the reference passes and that every wrong implementation is rejected.
  * ``world_size`` (2-4 on CPU), ``timeout_s`` (deadline of one launch; a deadlock in the
    learner's code costs about 3/4 of it), ``signature`` and ``hint`` (shown on failure).
  * ``explain_failure(exc) -> str | None`` (optional): the exercise's reading of a launch that
    failed (a rank raised, died or hung), e.g. find_the_hang's "a hang: ...".
A message names the learner's MISCONCEPTION, in their words ("you average twice: ReduceOp.AVG
already divides by the group size"), not only the symptom; tests/exercise_variants.py holds the
phrase each wrong version's message must contain. Helpers: ``first_problem(problem, group)``
(every rank stops together and reports the first failing rank's cause), ``raised_in(exc)``
(one plain line for an exception from a collective: "wrong group: ..." when it ran on the
default group).

Learner-facing API (re-exported by ``lab_utils.exercises``):
    check(name, fn, world_size=None, quiet=True) -> CheckResult   # prints the verdict
    check_many([(name, fn), ...]) -> [CheckResult]   # one launch per world size (tests)
    show_solution(name); list_exercises(lab=None); get(name)
    CheckResult(passed, message, details, name)
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

_REGISTRY: dict[str, "Exercise"] = {}
# Checks build optimizers, DDP and ledgers, which import torch._dynamo on first use (~1-4 s of
# CPU per rank): import it once before the ranks are forked (see lab_utils.run's preload).
CHECK_PRELOAD = ("torch._dynamo",)
DISCOVERY_ERRORS: dict[str, str] = {}  # module -> error, for modules that failed to import
_discovered = False


@dataclass(frozen=True)
class Verdict:
    """What an exercise's ``check`` returns on ONE rank."""

    passed: bool
    message: str = ""
    details: dict = field(default_factory=dict)

    @classmethod
    def ok(cls, message: str = "", **details: Any) -> "Verdict":
        return cls(True, message, details)

    @classmethod
    def fail(cls, message: str, **details: Any) -> "Verdict":
        return cls(False, message, details)


@dataclass(frozen=True)
class Exercise:
    """One exercise: its check, its reference solution, and answers it must reject."""

    name: str
    lab: str
    summary: str
    check: Callable[..., Verdict]
    reference: Callable
    wrong: Mapping[str, Callable]
    world_size: int = 4
    timeout_s: float = 60.0
    signature: str = ""
    hint: str = ""
    solution_helpers: tuple[Callable, ...] = ()
    # explain_failure(exc) -> str | None: the exercise's own reading of a launch that failed
    # (a rank raised, died or hung), in the learner's words; None: the generic message.
    explain_failure: Callable[[Exception], str | None] | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise ValueError(
                f"exercise name {self.name!r} must be a lower_case identifier "
                "(it becomes check_<name>)"
            )
        for what in ("check", "reference"):
            if not callable(getattr(self, what)):
                raise TypeError(f"Exercise {self.name!r}: {what} must be callable")
        if not self.wrong or not all(callable(f) for f in self.wrong.values()):
            raise ValueError(
                f"Exercise {self.name!r}: give at least one known-wrong "
                "implementation in wrong={description: callable}"
            )
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise ValueError(f"Exercise {self.name!r}: world_size must be a positive int")


@dataclass(frozen=True)
class CheckResult:
    """The verdict on a learner's function. ``details['per_rank']`` holds each rank's."""

    passed: bool
    message: str
    details: dict
    name: str = ""

    def __str__(self) -> str:
        head = "PASSED" if self.passed else "NOT YET"
        return f"[{head}] {self.name}: {self.message}"


def register(exercise: Exercise) -> Exercise:
    """Add an exercise to the registry (call it at the bottom of the exercise module)."""
    old = _REGISTRY.get(exercise.name)
    if old is not None and old.check.__module__ != exercise.check.__module__:
        raise ValueError(
            f"exercise {exercise.name!r} is already registered by "
            f"{old.check.__module__}; pick another name"
        )
    _REGISTRY[exercise.name] = exercise
    return exercise


def discover() -> dict[str, Exercise]:
    """Import every module of this package once (pkgutil); return the registry.

    A module that fails to import is recorded in DISCOVERY_ERRORS with a warning instead of
    breaking every other exercise (tests/test_exercises.py requires it to be empty).
    """
    global _discovered
    if not _discovered:
        _discovered = True
        package = importlib.import_module("lab_utils.exercises")
        for info in pkgutil.iter_modules(package.__path__):
            if info.name.startswith("_"):
                continue
            try:
                importlib.import_module(f"lab_utils.exercises.{info.name}")
            except Exception as exc:  # noqa: BLE001 - one broken module must not hide the rest
                DISCOVERY_ERRORS[info.name] = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"exercise module {info.name!r} failed to import: {exc}")
    return _REGISTRY


def get(name: str) -> Exercise:
    registry = discover()
    if name not in registry:
        raise KeyError(f"no exercise named {name!r}; available: {', '.join(sorted(registry))}")
    return registry[name]


def list_exercises(lab: str | None = None) -> list[Exercise]:
    """Registered exercises (of one lab if ``lab`` is given), sorted by lab then name."""
    found = [e for e in discover().values() if lab is None or e.lab == lab]
    return sorted(found, key=lambda e: (e.lab, e.name))


class _Source(str):
    """The printed solution: a notebook cell ending in show_solution(...) shows it once (the
    print), not a second time as the returned string's escaped repr."""

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython: nothing more to show
        pass


def _imports_needed(funcs: tuple[Callable, ...]) -> list[str]:
    """``from module import name`` for each global a function's body uses that a notebook
    does not have (not a module, not printed with it), e.g. zero1's ``AVG``."""
    shown = {f.__name__ for f in funcs}
    lines = []
    for f in funcs:
        code, module = getattr(f, "__code__", None), getattr(f, "__module__", "")
        for n in code.co_names if code else ():
            value = f.__globals__.get(n)
            if value is None or n in shown or inspect.ismodule(value):
                continue
            defined = inspect.isfunction(value) or inspect.isclass(value)
            origin = (getattr(value, "__module__", None) or "") if defined else module
            if origin.startswith("lab_utils"):  # a constant: from where the function has it
                lines.append(f"from {origin} import {n}")
    return sorted(set(lines))


def show_solution(name: str) -> str:
    """Print (and return) the source of the reference solution. Hidden until asked."""
    ex = get(name)
    funcs = (*ex.solution_helpers, ex.reference)
    text = _Source("\n\n".join(inspect.getsource(f) for f in funcs))
    needs = "".join(f"{line}\n" for line in _imports_needed(funcs))
    print(f"# reference solution for {name!r} (from {ex.reference.__module__})\n{needs}{text}")
    return text


def raised_in(exc: Exception, wrong_group: bool = False) -> str:
    """One plain line for an exception the learner's collective raised (no traceback): its
    first line, and the likely cause. ``wrong_group``: the same code passed on the whole
    world and raised on a sub-group, so a collective ran on the default group."""
    first = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
    text = str(exc)
    if wrong_group and ("size" in text or "shape" in text):
        return (
            f"wrong group: {first}. The same code ran on the whole world but not on a "
            "sub-group: a collective ran on the default group (every rank), whose size does "
            "not fit this group's buffers; pass group=group to every collective"
        )
    if "size" in text or "shape" in text:
        return (
            f"{first} (a buffer of the wrong size: an all-gather's output is K times its "
            "input, a reduce-scatter's output 1/K of it, K = the size of the group given)"
        )
    return f"{first} (raised inside your function)"


def first_problem(problem: str | None, group: Any = None) -> tuple[int, str] | None:
    """Every rank of ``group`` learns the first rank's problem (collective on ``group``):
    (rank in the group, its message), or None when every rank is right. So a rank whose own
    numbers are right reports its neighbour's cause, never "another rank is not right"."""
    import torch.distributed as dist

    problems: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(problems, problem, group=group)
    return next(((r, p) for r, p in enumerate(problems) if p), None)


# ---------------------------------------------------------------- helpers for check authors
def compare_tensors(
    got: Any,
    expected: torch.Tensor,
    what: str = "result",
    rtol: float = 1e-5,
    atol: float = 1e-6,
    unchanged: torch.Tensor | None = None,
) -> str | None:
    """None if ``got`` matches ``expected``; otherwise one sentence saying what differs.

    Recognises: not a tensor / None (forgot to return?), wrong shape or dtype, NaN/inf,
    equal to ``unchanged`` (the input was returned or never modified), a constant factor
    (summed instead of averaged, or averaged twice), and partial matches (which fraction
    of the elements is right, the first wrong index).
    """
    if got is None:
        return f"the {what} is None: did the function forget to return it?"
    if not isinstance(got, torch.Tensor):
        return f"the {what} should be a torch.Tensor, got {type(got).__name__}"
    if tuple(got.shape) != tuple(expected.shape):
        return f"the {what} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    if got.dtype != expected.dtype:
        return f"the {what} has dtype {got.dtype}, expected {expected.dtype}"
    got_d, exp_d = got.detach().cpu(), expected.detach().cpu()
    if torch.allclose(got_d, exp_d, rtol=rtol, atol=atol):
        return None
    if not torch.isfinite(got_d).all():
        return f"the {what} contains NaN or inf"
    if unchanged is not None and torch.equal(got_d, unchanged.detach().cpu()):
        return f"the {what} is still equal to the input: nothing was reduced/exchanged"
    nonzero = exp_d.abs() > atol
    if nonzero.any():
        ratios = got_d[nonzero] / exp_d[nonzero]
        k = ratios.mean().item()
        if torch.allclose(ratios, torch.full_like(ratios, k), rtol=1e-4) and abs(k) > 1e-12:
            return (
                f"the {what} is {k:.4g} x the expected values everywhere: a missing or "
                "extra division (sum vs mean?) or a step applied the wrong number of times"
            )
    wrong = ~torch.isclose(got_d, exp_d, rtol=rtol, atol=atol)
    first = tuple(int(i) for i in wrong.nonzero()[0])
    frac = wrong.float().mean().item()
    return (
        f"{frac:.0%} of the {what}'s elements differ (first at index {first}: got "
        f"{got_d[first].item():.6g}, expected {exp_d[first].item():.6g}; max abs diff "
        f"{(got_d - exp_d).abs().max().item():.3g})"
    )
