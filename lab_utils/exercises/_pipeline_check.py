"""The run loop the pipeline-order exercises share (``onef1b_order``, ``zb_h1_order``).

For every (p, m) of a grader's configurations: the learner's ``fn(stage, p, m)`` gives each stage's
order; a structural check may reject it at once; otherwise the orders run on real ranks
(``experiments.lab07.pipeline_step`` with simulated compute), and each rank's summary (deadlock,
first wrong gradient, peak in-flight micro-batches, timeline events) is gathered so that every rank
reaches the same verdict. With p smaller than the world, the world runs several pipelines and the
verdict reads the first one (every other rank).
"""
from __future__ import annotations

from typing import Any, Callable

import torch.distributed as dist

from lab_utils.exercises._core import Verdict, compare_tensors

Orders = list[list[str]]


def check_orders(ctx: Any, fn: Callable, configs: tuple[tuple[int, int], ...],
                 validate: Callable[[list, int, int], str | None],
                 verdict: Callable[[list[dict], Orders, int, int], Verdict],
                 t_f: float, stuck_after_s: float, title: str) -> Verdict:
    from lab_utils.experiments.lab07 import SimCompute, pipeline_step, reference_grads
    from lab_utils.parallel.pipeline_parallel.stage import PipelineStuck

    results = []
    for p, m in configs:
        orders = [fn(s, p, m) for s in range(p)]  # every rank evaluates all: same verdict
        problem = validate(orders, p, m)
        if problem:
            return Verdict.fail(problem)
        orders = [list(o) for o in orders]
        mine: dict[str, Any] = {"stuck": None}
        try:
            res = pipeline_step(ctx, order=lambda s, p_, m_: orders[s], m=m, pp=p,
                                sim=SimCompute(t_f), warmup_step=True,
                                deadlock_after_s=stuck_after_s)
            _, ref = reference_grads(m)
            wrong = (compare_tensors(g, ref[n], what=f"gradient of {n}")
                     for n, g in res.grads.items())
            mine.update(peak=res.peak_in_flight, events=res.events,
                        grad=next((w for w in wrong if w), None))
        except PipelineStuck as exc:
            mine["stuck"] = str(exc)
        everyone: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(everyone, mine, group=ctx.group)
        found = verdict(everyone[:p] if p == ctx.world_size else everyone[::2], orders, p, m)
        if not found.passed:
            return found
        results.append(found.message)
    return Verdict.ok(f"{title} on real ranks:\n  " + "\n  ".join(results))
