"""Exercise (lab 07): the order of operations of 1F1B on one pipeline stage.

The learner writes ``fn(stage, p, m) -> ["F0", "F1", "B0", "F2", "B1", ...]``. The check cuts
the tiny GPT into p stages (one per rank) and lets those orders DRIVE real pipelines
(``lab_utils.experiments.lab07.pipeline_step``: send/recv between neighbours, simulated compute
t_f = 10 ms, t_b = 20 ms) in three configurations that separate a right order from an
accidentally right one: p = 4 stages with m = 8 (steady state), two side-by-side pipelines of
p = 2 with m = 5 (pp groups {0, 2} and {1, 3}: a hard-coded p fails), and p = 4 with m = 2
(fewer micro-batches than stages: a warm-up without min(p - s - 1, m) fails). For each, in
this order:
  1. is each list a schedule at all (every F_i and B_i once, B_i after F_i)?
  2. did the run finish? A wrong order deadlocks: each stage reports what it waited for;
  3. are the gradients those of the single-process reference?
  4. does stage s hold at most min(p - s, m) micro-batches of activations (1F1B's promise)?
  5. does the order idle more than 1F1B? (its ideal timeline vs the reference order's; the
     measured bubble is reported next to it, but machine noise does not decide the verdict)
Communication per configuration: 2 (p-1) m p2p messages of (b, T, C) fp32 per pipeline, plus
one all_gather_object of each rank's summary (events, peak count, gradient verdict) so that
every rank judges alike.
"""
from __future__ import annotations

from typing import Any, Callable

from lab_utils.calc.timeline import bubble_from_timeline
from lab_utils.exercises._core import Exercise, Verdict, register
from lab_utils.exercises._pipeline_check import check_orders
from lab_utils.experiments.lab07.torch_pipeline import replay

CONFIGS = ((4, 8), (2, 5), (4, 2))  # (stages p, micro-batches m); p = 2 runs as 2 pipelines
T_F, STUCK_AFTER_S = 0.01, 3.0


def reference(stage: int, p: int, m: int) -> list[str]:
    """1F1B on stage ``stage`` of ``p``, ``m`` micro-batches."""
    warmup = min(p - stage - 1, m)  # forwards in flight before the first gradient comes back
    order = [f"F{i}" for i in range(warmup)]  # warm-up
    for j in range(m - warmup):  # steady state: one forward, one backward
        order += [f"F{warmup + j}", f"B{j}"]
    return order + [f"B{j}" for j in range(m - warmup, m)]  # cool-down


def wrong_gpipe(stage: int, p: int, m: int) -> list[str]:
    """GPipe's order: right gradients, same bubble, but every stage holds all m micro-batches."""
    return [f"F{i}" for i in range(m)] + [f"B{i}" for i in range(m)]


def wrong_warmup_by_stage(stage: int, p: int, m: int) -> list[str]:
    """Warm-up of `stage` forwards instead of p - stage - 1: stage 0 waits for a gradient
    before sending the forward its neighbour needs -> deadlock."""
    warmup = min(stage, m)
    order = [f"F{i}" for i in range(warmup)]
    for j in range(m - warmup):
        order += [f"F{warmup + j}", f"B{j}"]
    return order + [f"B{j}" for j in range(m - warmup, m)]


def wrong_no_warmup(stage: int, p: int, m: int) -> list[str]:
    """F0 B0 F1 B1 ...: valid, little memory, but one micro-batch at a time (no pipelining)."""
    return [op for i in range(m) for op in (f"F{i}", f"B{i}")]


def wrong_extra_warmup(stage: int, p: int, m: int) -> list[str]:
    """One warm-up forward too many: runs, but holds p - s + 1 micro-batches."""
    warmup = min(p - stage, m)
    order = [f"F{i}" for i in range(warmup)]
    for j in range(m - warmup):
        order += [f"F{warmup + j}", f"B{j}"]
    return order + [f"B{j}" for j in range(m - warmup, m)]


def wrong_no_min(stage: int, p: int, m: int) -> list[str]:
    """Warm-up of p - s - 1 forwards without min(., m): right while m >= p - 1, asks for
    micro-batches that do not exist when m is smaller."""
    warmup = p - stage - 1
    order = [f"F{i}" for i in range(warmup)]
    for j in range(m - warmup):
        order += [f"F{warmup + j}", f"B{j}"]
    return order + [f"B{j}" for j in range(max(m - warmup, 0), m)]


def wrong_hardcoded_p(stage: int, p: int, m: int) -> list[str]:
    """The diagram's p = 4 hard-coded: right at p = 4, too many in flight at p = 2."""
    return reference(min(stage, 3), 4, m)


def _validate(orders: list[Any], p: int, m: int) -> str | None:
    """Why the orders are not schedules at all, or None."""
    for s, order in enumerate(orders):
        if not isinstance(order, (list, tuple)) or not all(isinstance(op, str) for op in order):
            return f"stage {s}: return a list of strings like 'F0', 'B0', got {order!r:.80}"
        seen: set[str] = set()
        for k, op in enumerate(order):
            if len(op) < 2 or op[0] not in "FB" or not op[1:].isdigit() or int(op[1:]) >= m:
                return (f"p={p}, m={m}, stage {s}, position {k}: {op!r} is not 'F<i>' or "
                        f"'B<i>' with 0 <= i < m = {m} (m can be smaller than p: the warm-up "
                        "is min(p - s - 1, m) forwards)")
            if op in seen:
                return f"p={p}, m={m}, stage {s}: {op} appears twice (each micro-batch goes F once, B once)"
            if op[0] == "B" and f"F{op[1:]}" not in seen:
                return f"p={p}, m={m}, stage {s}: {op} comes before F{op[1:]} (a backward needs its forward)"
            seen.add(op)
        missing = [f"{k}{i}" for k in "FB" for i in range(m) if f"{k}{i}" not in seen]
        if missing:
            return (f"p={p}, m={m}, stage {s}: missing {', '.join(missing)} (every micro-batch needs a forward "
                    "and a backward on every stage; the cool-down drains the last backwards)")
    return None


def check(ctx: Any, fn: Callable) -> Verdict:
    return check_orders(ctx, fn, CONFIGS, _validate, _verdict, T_F, STUCK_AFTER_S, "1F1B")


def _verdict(ranks: list[dict], orders: list[list[str]], p: int, m: int) -> Verdict:
    """``ranks``: the summaries of ONE pipeline's stages, stage order."""
    where = f"p={p}, m={m}"
    stuck = [r["stuck"] for r in ranks if r["stuck"]]
    if stuck:
        return Verdict.fail(
            f"{where}: DEADLOCK on real ranks (no message for {STUCK_AFTER_S:g} s):\n  "
            + "\n  ".join(stuck) + "\nEach waiting stage needs a message its neighbour only "
            "sends AFTER its own wait is over: a cycle. A stage must run enough forwards "
            "(warm-up) before its first backward.", deadlock=True)
    grads = [(s, r["grad"]) for s, r in enumerate(ranks) if r["grad"]]
    if grads:
        return Verdict.fail(f"{where}, stage {grads[0][0]}: {grads[0][1]}")
    peaks = [r["peak"] for r in ranks]
    over = [s for s in range(p) if peaks[s] > min(p - s, m)]
    if over:
        s = over[0]
        return Verdict.fail(
            f"{where}: gradients are right, but stage {s} held the activations of {peaks[s]} "
            f"micro-batches at once (per stage: {peaks}); 1F1B holds at most min(p - s, m) = "
            f"{min(p - s, m)} on stage s (GPipe holds all m = {m}). The bubble is the same either way: 1F1B's gain is "
            "MEMORY, from starting each backward as early as possible.", peaks=peaks)
    measured = bubble_from_timeline([e for r in ranks for e in r["events"]]).mean
    ideal, yours = (p - 1) / (m + p - 1), _ideal_bubble(orders, p)
    best = _ideal_bubble([reference(s, p, m) for s in range(p)], p)
    if yours > best + 1e-9:
        return Verdict.fail(
            f"{where}: gradients right and memory within p - s {peaks}, but your order idles more: on "
            f"an ideal timeline (t_b = 2 t_f, free communication) the ranks idle {yours:.0%} of "
            f"the step, 1F1B (p-1)/(m+p-1) = {ideal:.0%}; measured on the ranks: {measured:.0%}."
            " Some stage waits for a gradient when it could be running forwards: check the "
            "warm-up count.", bubble=measured, peaks=peaks)
    same = orders == [reference(s, p, m) for s in range(p)]
    return Verdict.ok(f"{where}: gradients match the reference, peak in-flight {peaks} (<= min(p - s, m)), "
                      f"bubble {measured:.0%} measured vs (p-1)/(m+p-1) = {ideal:.0%}"
                      + ("" if same else " (your order differs from the textbook one)"),
                      bubble=measured, peaks=peaks)


def _ideal_bubble(orders: list[list[str]], p: int) -> float:
    """Idle fraction of the ideal timeline of these orders (t_b = 2 t_f, free communication);
    1.0 if they deadlock."""
    events = [dict(rank=s, name=op[0], mb=int(op[1:]), stage=s, start=k)
              for s in range(p) for k, op in enumerate(orders[s])]
    ideal = replay(events)
    return 1.0 if ideal is None else bubble_from_timeline(ideal).mean


register(Exercise(
    name="onef1b_order", lab="07_pipeline_parallel",
    summary="the order of forwards and backwards of 1F1B on each pipeline stage",
    check=check, reference=reference,
    wrong={"GPipe order (holds m micro-batches)": wrong_gpipe,
           "warm-up of `stage` forwards (deadlocks)": wrong_warmup_by_stage,
           "no warm-up (no pipelining)": wrong_no_warmup,
           "one warm-up forward too many (holds p - s + 1)": wrong_extra_warmup,
           "warm-up without min(., m) (m < p)": wrong_no_min,
           "p = 4 hard-coded (holds too many at p = 2)": wrong_hardcoded_p},
    world_size=4, timeout_s=90.0,
    signature='fn(stage, p, m) -> list[str], e.g. ["F0", "F1", "B0", "F2", "B1", ...]',
    hint="how many forwards must stage s run before the first gradient can come back to it, "
         "and what if there are fewer micro-batches than that? Then what keeps at most that many "
         "in flight, and what is left at the end?"))
