"""Exercise (lab 07): the order of F, B and W on one pipeline stage under ZB-H1 (Qi et al. 2023).

The learner writes ``fn(stage, p, m) -> ["F0", "F1", "B0", "W0", ...]``: F = forward, B = the input
gradient (sent to the previous stage, which waits for it), W = the weight gradient (deferred; nobody
waits for it). The check lets those orders DRIVE real pipelines on 4 ranks
(``lab_utils.parallel.pipeline_parallel.schedules.from_order``: send/recv between neighbours, on the
emulated cluster of ``lab07.pipeline_cluster``: 4 H100s in one node) in three configurations that
separate a right order from an accidentally right one: p = 4 stages with m = 8 (steady state), two
side-by-side pipelines of p = 2 with m = 5 (pp groups {0, 2} and {1, 3}, not the whole world: a
hard-coded p fails), and p = 4 with m = 3 (fewer micro-batches than stages). For each, in this
order:
  1. is each list a schedule (every F_i, B_i, W_i once; B_i after F_i; W_i after B_i)?
  2. did the run finish? A wrong order deadlocks: each stuck stage says what it waited for;
  3. are the gradients the single-process reference's? Neighbours that run their B's in
     different micro-batch orders swap gradients SILENTLY (messages are matched in order);
  4. does every stage hold at most min(p, m) micro-batches (ZB-H1 keeps 1F1B's peak p)?
  5. does the order idle more than ZB-H1 on its ideal timeline (free messages)?
Communication per configuration: 2 (p-1) m p2p messages of (b, T, C) fp32 per pipeline, plus
one all_gather_object of each rank's summary, so that every rank judges alike.
"""

from __future__ import annotations

from typing import Any, Callable

from lab_utils.calc.pipeline import bubble
from lab_utils.exercises._core import Exercise, Verdict, register
from lab_utils.exercises._pipeline_check import (
    check_orders,
    ideal_bubble,
    stuck_or_wrong,
    validate_orders,
)

CONFIGS = ((4, 8), (2, 5), (4, 3))  # (stages p, micro-batches m); p = 2 runs as 2 pipelines
STUCK_AFTER_S = 3.0


def reference(stage: int, p: int, m: int) -> list[str]:
    """ZB-H1 on stage ``stage`` of ``p``, ``m`` micro-batches (Qi et al. 2023, Sec. 3.1)."""
    lag_b = p - 1 - stage  # B trails F as in 1F1B: the stages downstream must fill first
    lag_w = p - 1  # W trails F by p - 1 on EVERY stage: stage s defers its W's by s
    order = []
    for x in range(m + lag_w):  # round x: F_x, then B_(x - lag_b), then W_(x - lag_w)
        if x < m:
            order.append(f"F{x}")
        if 0 <= x - lag_b < m:
            order.append(f"B{x - lag_b}")
        if 0 <= x - lag_w < m:
            order.append(f"W{x - lag_w}")
    return order


def _one_f_one_b(stage: int, p: int, m: int) -> list[tuple[str, int]]:
    warmup = min(p - stage - 1, m)
    ops = [("F", i) for i in range(warmup)]
    for j in range(m - warmup):
        ops += [("F", warmup + j), ("B", j)]
    return ops + [("B", j) for j in range(m - warmup, m)]


def wrong_w_after_b(stage: int, p: int, m: int) -> list[str]:
    """1F1B with each W right after its B: valid, 1F1B's memory, but 1F1B's bubble too."""
    return [
        f"{k}{i}" for k, i in _one_f_one_b(stage, p, m) for k in ((k,) if k == "F" else ("B", "W"))
    ]


def wrong_w_at_end(stage: int, p: int, m: int) -> list[str]:
    """1F1B's F/B order and every W at the very end: fills the bubble, but each stage keeps
    every micro-batch's activations until its W (GPipe's memory)."""
    return [f"{k}{i}" for k, i in _one_f_one_b(stage, p, m)] + [f"W{i}" for i in range(m)]


def wrong_lifo_cooldown(stage: int, p: int, m: int) -> list[str]:
    """ZB-H1, but the cool-down's B's drain the newest micro-batch first: the neighbour sends
    the gradients oldest first, so micro-batches swap gradients (no error, wrong result)."""
    order = reference(stage, p, m)
    cut = order.index(f"F{m - 1}") + 1
    tail = [int(op[1:]) for op in order[cut:] if op[0] == "B"]
    newest_first = dict(zip(tail, reversed(tail)))  # its W's follow along (W_i after B_i)
    return order[:cut] + [
        op[0] + str(newest_first.get(int(op[1:]), int(op[1:]))) for op in order[cut:]
    ]


def wrong_warmup_by_stage(stage: int, p: int, m: int) -> list[str]:
    """B trails F by `stage` instead of p - 1 - stage: stage 0 waits for a gradient before
    sending the forward that its neighbour needs to produce it -> deadlock."""
    order = []
    for x in range(m + p - 1):
        order += [f"F{x}"] if x < m else []
        order += [f"B{x - stage}"] if 0 <= x - stage < m else []
        order += [f"W{x - p + 1}"] if 0 <= x - p + 1 < m else []
    return order


def wrong_hardcoded_p(stage: int, p: int, m: int) -> list[str]:
    """The diagram's p = 4 hard-coded: right at p = 4, too many in flight at p = 2."""
    return reference(min(stage, 3), 4, m)


def _validate(orders: list[Any], p: int, m: int) -> str | None:
    """Why the orders are not schedules at all, or None."""
    return validate_orders(
        orders,
        p,
        m,
        {"B": "F", "W": "B"},
        "B needs its forward's activations; W needs the output gradient that B received",
        "every micro-batch needs F, B and W on every stage",
    )


def check(ctx: Any, fn: Callable) -> Verdict:
    return check_orders(ctx, fn, CONFIGS, _validate, _verdict, STUCK_AFTER_S, "ZB-H1")


def _verdict(ranks: list[dict], orders: list[list[str]], p: int, m: int) -> Verdict:
    """``ranks``: the summaries of ONE pipeline's stages, stage order."""
    where = f"p={p}, m={m}"
    failed = stuck_or_wrong(
        ranks,
        where,
        STUCK_AFTER_S,
        "Before its first B, a stage must run the forwards that "
        "the stages after it need to send a gradient back.",
        ". No deadlock, but wrong "
        "gradients: messages between two stages are matched in the order they were sent, so a "
        "stage whose B's (or F's) run in another micro-batch order than its neighbour's "
        "computes one micro-batch's backward with another one's gradient.",
    )
    if failed:
        return failed
    peaks, cap = [r["peak"] for r in ranks], min(p, m)
    over = [s for s in range(p) if peaks[s] > cap]
    if over:
        s = over[0]
        return Verdict.fail(
            f"{where}: gradients right, but stage {s} held the activations of {peaks[s]} "
            f"micro-batches at once (per stage: {peaks}); ZB-H1 holds at most min(p, m) = {cap}, "
            "1F1B's peak. A micro-batch's activations are freed only by its W: deferring W "
            "costs memory.",
            peaks=peaks,
        )
    yours = ideal_bubble(orders, p, 1.0, 2.0, 1.0, split=True)
    best = ideal_bubble([reference(s, p, m) for s in range(p)], p, 1.0, 2.0, 1.0, split=True)
    if yours > best + 1e-9:
        return Verdict.fail(
            f"{where}: gradients right, memory within {cap} {peaks}, but your order idles more: "
            f"on an ideal timeline (t_f = T_B = T_W, free messages) the ranks idle {yours:.1%} "
            f"of the step, ZB-H1 {best:.1%} (1F1B: {bubble('1f1b', p, m).of_total:.1%}). "
            "Where does a stage wait for a gradient while it still has work it could do?",
            peaks=peaks,
        )
    return Verdict.ok(
        f"{where}: gradients match the reference, peak in-flight {peaks} <= "
        f"{cap}, ideal bubble {yours:.1%}",
        peaks=peaks,
    )


register(
    Exercise(
        name="zb_h1_order",
        lab="07_pipeline_parallel",
        summary="the order of F, B and W of ZB-H1 (zero-bubble) on each pipeline stage",
        check=check,
        reference=reference,
        wrong={
            "W right after its B (1F1B's bubble)": wrong_w_after_b,
            "every W at the end (holds all m micro-batches)": wrong_w_at_end,
            "cool-down B's newest first (neighbours swap gradients)": wrong_lifo_cooldown,
            "B trails F by `stage` (deadlocks)": wrong_warmup_by_stage,
            "p = 4 hard-coded (holds too many at p = 2)": wrong_hardcoded_p,
        },
        world_size=4,
        timeout_s=90.0,
        signature='fn(stage, p, m) -> list[str], e.g. ["F0", "F1", "B0", "W0", "F2", ...]',
        hint="start from 1F1B's F/B order: which stages have idle slots where a deferred W fits, "
        "and how long can a stage defer its W's before it holds more than p micro-batches?",
    )
)
