"""Exercise (lab 07): the order of operations of 1F1B on one pipeline stage.

The learner writes ``fn(stage, p, m) -> ["F0", "F1", "B0", "F2", "B1", ...]``. The check cuts
the tiny GPT into p = 4 stages (one per rank) and lets those orders DRIVE a real pipeline
(``lab_utils.parallel.pipeline_parallel.schedules.from_order``: send/recv between neighbours, simulated compute t_f = 10 ms,
t_b = 20 ms). Then, in this order, it asks:
  1. is each list a schedule at all (every F_i and B_i once, B_i after F_i)?
  2. did the run finish? A wrong order deadlocks: each stage reports what it waited for;
  3. are the gradients those of the single-process reference?
  4. does stage s hold at most p - s micro-batches of activations (1F1B's promise)?
  5. does the order idle more than 1F1B? (its ideal timeline vs (p-1)/(m+p-1); the measured
     bubble is reported next to it, but machine noise does not decide the verdict)
Communication per check: 2 (p-1) m p2p messages of (b, T, C) fp32, plus one all_gather_object of
each rank's summary (events, peak count, gradient verdict) so that every rank judges alike.
"""
from __future__ import annotations

from typing import Any, Callable

import torch.distributed as dist

from lab_utils.calc.timeline import bubble_from_timeline
from lab_utils.exercises._core import Exercise, Verdict, compare_tensors, register
from lab_utils.parallel.pipeline_parallel.schedules import PipelineStuck, SimCompute, pipeline_step, reference_grads
from lab_utils.parallel.pipeline_parallel.torch_schedules import replay

M, T_F, STUCK_AFTER_S = 8, 0.01, 3.0


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


def _validate(orders: list[Any], p: int, m: int) -> str | None:
    """Why the orders are not schedules at all, or None."""
    for s, order in enumerate(orders):
        if not isinstance(order, (list, tuple)) or not all(isinstance(op, str) for op in order):
            return f"stage {s}: return a list of strings like 'F0', 'B0', got {order!r:.80}"
        seen: set[str] = set()
        for k, op in enumerate(order):
            if len(op) < 2 or op[0] not in "FB" or not op[1:].isdigit() or int(op[1:]) >= m:
                return (f"stage {s}, position {k}: {op!r} is not 'F<i>' or 'B<i>' with "
                        f"0 <= i < m = {m}")
            if op in seen:
                return f"stage {s}: {op} appears twice (each micro-batch goes F once, B once)"
            if op[0] == "B" and f"F{op[1:]}" not in seen:
                return f"stage {s}: {op} comes before F{op[1:]} (a backward needs its forward)"
            seen.add(op)
        missing = [f"{k}{i}" for k in "FB" for i in range(m) if f"{k}{i}" not in seen]
        if missing:
            return (f"stage {s}: missing {', '.join(missing)} (every micro-batch needs a forward "
                    "and a backward on every stage; the cool-down drains the last backwards)")
    return None


def check(ctx: Any, fn: Callable) -> Verdict:
    p, m = ctx.world_size, M
    orders = [fn(s, p, m) for s in range(p)]  # every rank evaluates all: same verdict everywhere
    problem = _validate(orders, p, m)
    if problem:
        return Verdict.fail(problem)
    orders = [list(o) for o in orders]
    mine: dict[str, Any] = {"stuck": None}
    try:
        res = pipeline_step(ctx, order=lambda s, p_, m_: orders[s], m=m,
                            sim=SimCompute(T_F), warmup_step=True,
                            deadlock_after_s=STUCK_AFTER_S)
        _, ref = reference_grads(m)
        wrong = (compare_tensors(g, ref[n], what=f"gradient of {n}")
                 for n, g in res["grads"].items())
        mine.update(peak=res["peak_in_flight"], events=res["events"],
                    grad=next((w for w in wrong if w), None))
    except PipelineStuck as exc:
        mine["stuck"] = str(exc)
    everyone: list[Any] = [None] * p
    dist.all_gather_object(everyone, mine, group=ctx.group)
    return _verdict(everyone, orders, p, m)


def _verdict(ranks: list[dict], orders: list[list[str]], p: int, m: int) -> Verdict:
    stuck = [r["stuck"] for r in ranks if r["stuck"]]
    if stuck:
        return Verdict.fail(
            f"DEADLOCK on real ranks (no message for {STUCK_AFTER_S:g} s):\n  "
            + "\n  ".join(stuck) + "\nEach waiting stage needs a message its neighbour only "
            "sends AFTER its own wait is over: a cycle. A stage must run enough forwards "
            "(warm-up) before its first backward.", deadlock=True)
    grads = [(s, r["grad"]) for s, r in enumerate(ranks) if r["grad"]]
    if grads:
        return Verdict.fail(f"stage {grads[0][0]}: {grads[0][1]}")
    peaks = [r["peak"] for r in ranks]
    over = [s for s in range(p) if peaks[s] > p - s]
    if over:
        s = over[0]
        return Verdict.fail(
            f"gradients are right, but stage {s} held the activations of {peaks[s]} micro-"
            f"batches at once (per stage: {peaks}); 1F1B holds at most p - s = {p - s} on stage "
            f"s (GPipe holds all m = {m}). The bubble is the same either way: 1F1B's gain is "
            "MEMORY, from starting each backward as early as possible.", peaks=peaks)
    measured = bubble_from_timeline([e for r in ranks for e in r["events"]]).mean
    ideal, yours = (p - 1) / (m + p - 1), _ideal_bubble(orders, p)
    if yours > ideal + 1e-9:
        return Verdict.fail(
            f"gradients right and memory within p - s {peaks}, but your order idles more: on "
            f"an ideal timeline (t_b = 2 t_f, free communication) the ranks idle {yours:.0%} of "
            f"the step, 1F1B (p-1)/(m+p-1) = {ideal:.0%}; measured on the ranks: {measured:.0%}."
            " Some stage waits for a gradient when it could be running forwards: check the "
            "warm-up count.", bubble=measured, peaks=peaks)
    same = orders == [reference(s, p, m) for s in range(p)]
    return Verdict.ok(f"1F1B: gradients match the reference, peak in-flight {peaks} (<= p - s), "
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
           "one warm-up forward too many (holds p - s + 1)": wrong_extra_warmup},
    world_size=4, timeout_s=60.0,
    signature='fn(stage, p, m) -> list[str], e.g. ["F0", "F1", "B0", "F2", "B1", ...]',
    hint="stage s runs p - s - 1 forwards (warm-up), then alternates one forward and one "
         "backward (steady state), then runs the remaining backwards (cool-down)."))
