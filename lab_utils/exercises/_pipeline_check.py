"""The run loop the pipeline-order exercises share (``onef1b_order``, ``zb_h1_order``).

For every (p, m) of a grader's configurations: the learner's ``fn(stage, p, m)`` gives each stage's
order; a structural check may reject it at once; otherwise the orders run on real ranks
(``experiments.lab07.pipeline_step`` on the emulated cluster, ``twin.emulate.emulating``), and each
rank's summary (deadlock, first wrong gradient, peak in-flight micro-batches, timeline events) is
gathered so that every rank reaches the same verdict. With p smaller than the world, the world runs
several pipelines and the verdict reads the first one (every other rank). Also shared: the
structural check of the orders (``validate_orders``), the first two verdicts (``stuck_or_wrong``: a
deadlock, wrong gradients) and the idle fraction of the orders' ideal timeline (``ideal_bubble``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch.distributed as dist

from lab_utils.exercises._core import Verdict, compare_tensors

Orders = list[list[str]]


def check_orders(
    ctx: Any,
    fn: Callable,
    configs: tuple[tuple[int, int], ...],
    validate: Callable[[list, int, int], str | None],
    verdict: Callable[[list[dict], Orders, int, int], Verdict],
    stuck_after_s: float,
    title: str,
) -> Verdict:
    from lab_utils.experiments.lab07 import pipeline_step, reference_grads
    from lab_utils.experiments.lab07.pipeline import pipeline_cluster, pipeline_scale
    from lab_utils.parallel.pipeline_parallel.stage import PipelineStuck
    from lab_utils.twin.emulate import emulating

    results = []
    for p, m in configs:
        orders = [fn(s, p, m) for s in range(p)]  # every rank evaluates all: same verdict
        problem = validate(orders, p, m)
        if problem:
            return Verdict.fail(problem)
        orders = [list(o) for o in orders]
        mine: dict[str, Any] = {"stuck": None}
        try:
            with emulating(ctx, pipeline_cluster(p=ctx.world_size), pipeline_scale()) as ectx:
                res = pipeline_step(
                    ectx,
                    order=lambda s, p_, m_: orders[s],
                    m=m,
                    pp=p,
                    deadlock_after_s=stuck_after_s,
                )
            _, ref = reference_grads(m)
            wrong = (
                compare_tensors(g, ref[n], what=f"gradient of {n}") for n, g in res.grads.items()
            )
            mine.update(
                peak=res.peak_in_flight, events=res.events, grad=next((w for w in wrong if w), None)
            )
        except PipelineStuck as exc:
            mine["stuck"] = str(exc)
        everyone: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(everyone, mine, group=ctx.group)
        found = verdict(everyone[:p] if p == ctx.world_size else everyone[::2], orders, p, m)
        if not found.passed:
            return found
        results.append(found.message)
    return Verdict.ok(f"{title} on real ranks:\n  " + "\n  ".join(results))


def validate_orders(
    orders: list[Any], p: int, m: int, needs: dict[str, str], before_why: str, missing_why: str
) -> str | None:
    """Why the orders are not schedules at all, or None. ``needs``: op kind -> the kind that
    must come first for the same micro-batch ({"B": "F"}, or {"B": "F", "W": "B"})."""
    kinds = "F" + "".join(needs)
    names = ", ".join(f"'{k}<i>'" for k in kinds)
    for s, order in enumerate(orders):
        if not isinstance(order, (list, tuple)) or not all(isinstance(op, str) for op in order):
            return f"stage {s}: return a list of strings like {names}, got {order!r:.80}"
        seen: set[str] = set()
        for k, op in enumerate(order):
            if len(op) < 2 or op[0] not in kinds or not op[1:].isdigit() or int(op[1:]) >= m:
                return (
                    f"p={p}, m={m}, stage {s}, position {k}: {op!r} is not one of {names} "
                    f"with 0 <= i < m = {m} (m can be smaller than p: the warm-up is "
                    "min(p - s - 1, m) forwards)"
                )
            if op in seen:
                return (
                    f"p={p}, m={m}, stage {s}: {op} appears twice (each kind once per micro-batch)"
                )
            need = needs.get(op[0])
            if need and f"{need}{op[1:]}" not in seen:
                return f"p={p}, m={m}, stage {s}: {op} comes before {need}{op[1:]} ({before_why})"
            seen.add(op)
        missing = [f"{k}{i}" for k in kinds for i in range(m) if f"{k}{i}" not in seen]
        if missing:
            return f"p={p}, m={m}, stage {s}: missing {', '.join(missing[:6])} ({missing_why})"
    return None


def stuck_or_wrong(
    ranks: list[dict], where: str, stuck_after_s: float, unstick: str, wrong_note: str = ""
) -> Verdict | None:
    """The verdict on a pipeline that deadlocked or computed wrong gradients, else None."""
    stuck = [r["stuck"] for r in ranks if r["stuck"]]
    if stuck:
        return Verdict.fail(
            f"{where}: DEADLOCK on real ranks (no message for {stuck_after_s:g} s):\n  "
            + "\n  ".join(stuck)
            + "\nEach waiting stage needs a message its neighbour only "
            f"sends AFTER its own wait is over: a cycle. {unstick}",
            deadlock=True,
        )
    grads = [(s, r["grad"]) for s, r in enumerate(ranks) if r["grad"]]
    if grads:
        return Verdict.fail(f"{where}, stage {grads[0][0]}: {grads[0][1]}{wrong_note}")
    return None


def ideal_bubble(orders: Orders, p: int, *replay_args: Any, **replay_kwargs: Any) -> float:
    """Idle fraction of the ideal timeline of these orders (free communication; the op times
    in ``replay_args``); 1.0 if they deadlock."""
    from lab_utils.calc.timeline import bubble_from_timeline
    from lab_utils.experiments.lab07.torch_pipeline import replay

    events = [
        dict(rank=s, name=op[0], mb=int(op[1:]), stage=s, start=k)
        for s in range(p)
        for k, op in enumerate(orders[s])
    ]
    ideal = replay(events, *replay_args, **replay_kwargs)
    return 1.0 if ideal is None else bubble_from_timeline(ideal).mean
