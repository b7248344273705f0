"""Running exercise checks on real ranks: one launch per check, or one per world size (check_many).

A check runs ``Exercise.check(ctx, fn)`` on every rank; the per-rank verdicts are combined into
one ``CheckResult``. A learner's function that raises or deadlocks never raises here: the failed
launch becomes a failed result whose message names the cause (see ``_core`` for the API).
"""

from __future__ import annotations

from typing import Any, Callable

from lab_utils.classroom.client import exercise_checked
from lab_utils.exercises._core import CHECK_PRELOAD, CheckResult, Exercise, Verdict, get


def _verdict_on_rank(ctx: Any, ex_check: Callable, fn: Callable) -> dict:
    """Run one check on this rank. A stub's NotImplementedError is a verdict, not a crash;
    any other exception propagates so that the launcher stops every rank (a rank that raised
    in the middle of a collective would leave the others waiting)."""
    try:
        verdict = ex_check(ctx, fn)
    except NotImplementedError as exc:
        return {
            "passed": False,
            "message": f"not implemented yet ({exc})" if str(exc) else "not implemented yet",
            "details": {"not_implemented": True},
        }
    if not isinstance(verdict, Verdict):
        raise TypeError(f"an exercise check must return a Verdict, got {type(verdict).__name__}")
    return {"passed": verdict.passed, "message": verdict.message, "details": verdict.details}


def _checks_on_rank(ctx: Any, jobs: list[tuple[Callable, Callable]]) -> list[dict]:
    """Several checks in one launch (check_many); a barrier keeps the ranks in step."""
    import torch.distributed as dist

    out = []
    for ex_check, fn in jobs:
        out.append(_verdict_on_rank(ctx, ex_check, fn))
        dist.barrier(group=ctx.group)
    return out


def _combine(name: str, per_rank: list[dict]) -> CheckResult:
    failing = [r for r, v in enumerate(per_rank) if not v["passed"]]
    details = {"per_rank": per_rank}
    if not failing:
        return CheckResult(
            True, per_rank[0]["message"] or "matches the reference on every rank", details, name
        )
    first = per_rank[failing[0]]
    if first["details"].get("not_implemented"):
        return CheckResult(False, first["message"], details, name)
    same = all(per_rank[r]["message"] == first["message"] for r in failing)
    if same and len(failing) == len(per_rank) and "rank " in first["message"]:
        return CheckResult(False, first["message"], details, name)  # it names its rank itself
    where = (
        "every rank" if len(failing) == len(per_rank) else ("rank " + ", ".join(map(str, failing)))
    )
    return CheckResult(False, f"{where}: {first['message']}", details, name)


def _from_failure(name: str, exc: Exception) -> CheckResult:
    from lab_utils.runtime.launch import RankTimeout

    explain = get(name).explain_failure
    own = explain(exc) if explain else None
    if own:
        return CheckResult(False, own, {"exception": type(exc).__name__}, name)
    # A rank whose receive or collective timed out raises a RankFailure of its own; either
    # way the cause is ranks waiting for each other.
    if isinstance(exc, RankTimeout) or "timed out" in str(exc).lower():
        msg = (
            "your ranks got stuck (a deadlock: every rank must make matching sends, "
            f"receives and collectives in the same order).\n{exc}"
        )
    else:
        msg = f"your code raised an exception:\n{exc}"
    return CheckResult(False, msg, {"exception": type(exc).__name__}, name)


def _report(result: CheckResult, ex: Exercise) -> CheckResult:
    print(result)
    exercise_checked(result.name, result.passed, result.message)  # a live class, if joined
    if not result.passed and ex.hint:
        print(f"hint: {ex.hint}")
    return result


def _run_one(name: str, fn: Callable, world_size: int | None, quiet: bool) -> CheckResult:
    """One exercise, one launch; a failed launch becomes a failed CheckResult."""
    from lab_utils.runtime.launch import RankFailure, run

    ex = get(name)
    try:
        per_rank = run(
            _checks_on_rank,
            world_size or ex.world_size,
            [(ex.check, fn)],
            timeout_s=ex.timeout_s,
            quiet=quiet,
            preload=CHECK_PRELOAD,
        )
    except RankFailure as exc:
        return _from_failure(name, exc)
    return _combine(name, [r[0] for r in per_rank])


def check(
    name: str, fn: Callable, world_size: int | None = None, quiet: bool = True
) -> CheckResult:
    """Run ``fn`` through exercise ``name`` on real ranks; print and return the verdict.

    Never raises for a wrong answer (only for an unknown name or a non-callable fn).
    """
    if not callable(fn):
        raise TypeError(f"check({name!r}, fn): fn must be your function, got {fn!r}")
    return _report(_run_one(name, fn, world_size, quiet), get(name))


def check_many(
    items: list[tuple[str, Callable]], quiet: bool = True, verbose: bool = False
) -> list[CheckResult]:
    """Check several (name, fn) pairs with one launch per world size (tests, quick mode).

    If a launch fails (some fn raised or deadlocked), its items are re-run one by one so
    each gets its own verdict. ``verbose`` prints each verdict.
    """
    from lab_utils.runtime.launch import RankFailure, run

    results: list[CheckResult | None] = [None] * len(items)
    by_size: dict[int, list[int]] = {}
    for i, (name, _) in enumerate(items):
        by_size.setdefault(get(name).world_size, []).append(i)
    for size, idx in by_size.items():
        jobs = [(get(items[i][0]).check, items[i][1]) for i in idx]
        timeout = sum(get(items[i][0]).timeout_s for i in idx)
        try:
            per_rank = run(
                _checks_on_rank, size, jobs, timeout_s=timeout, quiet=quiet, preload=CHECK_PRELOAD
            )
        except RankFailure as exc:
            if len(idx) == 1:  # its own failure: no need to run it again to know
                results[idx[0]] = _from_failure(items[idx[0]][0], exc)
                continue
            for i in idx:
                results[i] = _run_one(items[i][0], items[i][1], None, quiet)
            continue
        for k, i in enumerate(idx):
            results[i] = _combine(items[i][0], [r[k] for r in per_rank])
    if verbose:
        for (name, fn), r in zip(items, results):
            if fn is get(name).reference:  # SHOW_REFERENCE: not to be read as the learner's
                print(
                    f"[{'PASSED' if r.passed else 'NOT YET'}] {name} (the REFERENCE solution, "
                    f"not yours): {r.message}"
                )
            else:
                _report(r, get(name))
    return results  # type: ignore[return-value]
