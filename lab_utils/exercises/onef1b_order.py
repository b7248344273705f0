"""Exercise (lab 07): the order of operations of 1F1B on one pipeline stage.

The learner writes ``fn(stage, p, m) -> ["F0", "F1", "B0", "F2", "B1", ...]``. The check cuts the
tiny GPT into p stages (one per rank) and lets those orders DRIVE real pipelines
(``lab_utils.experiments.lab07.pipeline_step``: send/recv between neighbours, on the emulated
cluster of ``lab07.pipeline_cluster``: 4 H100s in one node) in three configurations that separate a
right order from an accidentally right one: p = 4 stages with m = 8 (steady state), two side-by-side
pipelines of p = 2 with m = 5 (pp groups {0, 2} and {1, 3}: a hard-coded p fails), and p = 4 with m
= 2 (fewer micro-batches than stages: a warm-up without min(p - s - 1, m) fails). For each, in this
order:
  1. is each list a schedule at all (every F_i and B_i once, B_i after F_i)?
  2. did the run finish? A wrong order deadlocks: each stage reports what it waited for;
  3. are the gradients those of the single-process reference?
  4. does stage s hold at most min(p - s, m) micro-batches of activations (1F1B's promise)?
  5. does the order idle more than 1F1B? (its ideal timeline vs the reference order's; the
     bubble on the emulated clock is reported next to it)
Communication per configuration: 2 (p-1) m p2p messages of (b, T, C) fp32 per pipeline, plus
one all_gather_object of each rank's summary (events, peak count, gradient verdict) so that
every rank judges alike.
"""

from __future__ import annotations

from typing import Any, Callable

from lab_utils.calc.timeline import bubble_from_timeline
from lab_utils.exercises._core import Exercise, Verdict, register
from lab_utils.exercises._pipeline_check import (
    check_orders,
    ideal_bubble,
    stuck_or_wrong,
    validate_orders,
)

CONFIGS = ((4, 8), (2, 5), (4, 2))  # (stages p, micro-batches m); p = 2 runs as 2 pipelines
STUCK_AFTER_S = 3.0


def _with_warmup(warmup: int, m: int) -> list[str]:
    """``warmup`` forwards, then one forward and one backward at a time, then the rest of the
    backwards (1F1B's shape, whatever the warm-up count)."""
    order = [f"F{i}" for i in range(warmup)]  # warm-up
    for j in range(m - warmup):  # steady state: one forward, one backward
        order += [f"F{warmup + j}", f"B{j}"]
    return order + [f"B{j}" for j in range(max(m - warmup, 0), m)]  # cool-down


def reference(stage: int, p: int, m: int) -> list[str]:
    """1F1B on stage ``stage`` of ``p``, ``m`` micro-batches."""
    return _with_warmup(min(p - stage - 1, m), m)  # in flight before a gradient comes back


def wrong_gpipe(stage: int, p: int, m: int) -> list[str]:
    """GPipe's order: right gradients, same bubble, but every stage holds all m micro-batches."""
    return [f"F{i}" for i in range(m)] + [f"B{i}" for i in range(m)]


def wrong_warmup_by_stage(stage: int, p: int, m: int) -> list[str]:
    """Warm-up of `stage` forwards instead of p - stage - 1: stage 0 waits for a gradient
    before sending the forward its neighbour needs -> deadlock."""
    return _with_warmup(min(stage, m), m)


def wrong_no_warmup(stage: int, p: int, m: int) -> list[str]:
    """F0 B0 F1 B1 ...: valid, little memory, but one micro-batch at a time (no pipelining)."""
    return [op for i in range(m) for op in (f"F{i}", f"B{i}")]


def wrong_extra_warmup(stage: int, p: int, m: int) -> list[str]:
    """One warm-up forward too many: runs, but holds p - s + 1 micro-batches."""
    return _with_warmup(min(p - stage, m), m)


def wrong_no_min(stage: int, p: int, m: int) -> list[str]:
    """Warm-up of p - s - 1 forwards without min(., m): right while m >= p - 1, asks for
    micro-batches that do not exist when m is smaller."""
    return _with_warmup(p - stage - 1, m)


def wrong_hardcoded_p(stage: int, p: int, m: int) -> list[str]:
    """The diagram's p = 4 hard-coded: right at p = 4, too many in flight at p = 2."""
    return reference(min(stage, 3), 4, m)


def _validate(orders: list[Any], p: int, m: int) -> str | None:
    """Why the orders are not schedules at all, or None."""
    return validate_orders(
        orders,
        p,
        m,
        {"B": "F"},
        "a backward needs its forward",
        "every micro-batch needs a forward and a backward on every stage; "
        "the cool-down drains the last backwards",
    )


def check(ctx: Any, fn: Callable) -> Verdict:
    return check_orders(ctx, fn, CONFIGS, _validate, _verdict, STUCK_AFTER_S, "1F1B")


def _verdict(ranks: list[dict], orders: list[list[str]], p: int, m: int) -> Verdict:
    """``ranks``: the summaries of ONE pipeline's stages, stage order."""
    where = f"p={p}, m={m}"
    failed = stuck_or_wrong(
        ranks,
        where,
        STUCK_AFTER_S,
        "A stage must run enough forwards (warm-up) before its first backward.",
    )
    if failed:
        return failed
    peaks = [r["peak"] for r in ranks]
    over = [s for s in range(p) if peaks[s] > min(p - s, m)]
    if over:
        s = over[0]
        return Verdict.fail(
            f"{where}: gradients are right, but stage {s} held the activations of {peaks[s]} "
            f"micro-batches at once (per stage: {peaks}); 1F1B holds at most min(p - s, m) = "
            f"{min(p - s, m)} on stage s (GPipe holds all m = {m}). The bubble is the same "
            "either way: 1F1B's gain is MEMORY, from starting each backward as early as "
            "possible.",
            peaks=peaks,
        )
    measured = bubble_from_timeline([e for r in ranks for e in r["events"]]).mean
    ideal, yours = (p - 1) / (m + p - 1), ideal_bubble(orders, p)
    best = ideal_bubble([reference(s, p, m) for s in range(p)], p)
    if yours > best + 1e-9:
        return Verdict.fail(
            f"{where}: gradients right and memory within p - s {peaks}, but your order idles "
            f"more: on an ideal timeline (t_b = 2 t_f, free communication) the ranks idle "
            f"{yours:.0%} of the step, 1F1B (p-1)/(m+p-1) = {ideal:.0%}; measured on the "
            f"ranks: {measured:.0%}."
            " Some stage waits for a gradient when it could be running forwards: check the "
            "warm-up count.",
            bubble=measured,
            peaks=peaks,
        )
    same = orders == [reference(s, p, m) for s in range(p)]
    return Verdict.ok(
        f"{where}: gradients match the reference, peak in-flight {peaks} "
        f"(<= min(p - s, m)), bubble {measured:.0%} measured vs (p-1)/(m+p-1) = "
        f"{ideal:.0%}" + ("" if same else " (your order differs from the textbook one)"),
        bubble=measured,
        peaks=peaks,
    )


register(
    Exercise(
        name="onef1b_order",
        lab="07_pipeline_parallel",
        summary="the order of forwards and backwards of 1F1B on each pipeline stage",
        check=check,
        reference=reference,
        wrong={
            "GPipe order (holds m micro-batches)": wrong_gpipe,
            "warm-up of `stage` forwards (deadlocks)": wrong_warmup_by_stage,
            "no warm-up (no pipelining)": wrong_no_warmup,
            "one warm-up forward too many (holds p - s + 1)": wrong_extra_warmup,
            "warm-up without min(., m) (m < p)": wrong_no_min,
            "p = 4 hard-coded (holds too many at p = 2)": wrong_hardcoded_p,
        },
        world_size=4,
        timeout_s=90.0,
        solution_helpers=(_with_warmup,),
        signature='fn(stage, p, m) -> list[str], e.g. ["F0", "F1", "B0", "F2", "B1", ...]',
        hint="how many forwards must stage s run before the first gradient can come back to it, "
        "and what if there are fewer micro-batches than that? Then what keeps at most that many "
        "in flight, and what is left at the end?",
    )
)
