"""The same pipeline through torch.distributed.pipelining: GPipe, 1F1B, interleaved 1F1B and
zero-bubble schedules (lab 07, after the from-scratch versions in ``schedules.py``).

Rank r holds v stages (model chunks) of p*v: "loop" placement r, r+p, ... for
ScheduleInterleaved1F1B / ScheduleInterleavedZeroBubble (Narayanan et al. 2021 Sec. 2.2.2;
Qi et al. 2023), "V" placement r and 2p-1-r for ScheduleZBVZeroBubble (Qi et al. 2023 Sec. 6).

Communication: torch's PipelineStage sends the same p2p messages as our StageWorker, the
activation forward and the activation gradient backward, (b, T, C) fp32 = 4bTC bytes each, per
STAGE boundary: with v chunks a micro-batch crosses p*v - 1 boundaries instead of p - 1, so the
p2p traffic per step is v times that of 1F1B (the price of the v-times-smaller bubble).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from torch import nn

from lab_utils.parallel.pipeline_parallel.stage import stage_position

# name -> (class in torch.distributed.pipelining, chunks per rank v, placement, backward split
# into B = input gradient, sent on at once, and a deferred W = weight gradient?)
TORCH_SCHEDULES = {
    "gpipe": ("ScheduleGPipe", 1, "loop", False),
    "1f1b": ("Schedule1F1B", 1, "loop", False),
    "interleaved-1f1b": ("ScheduleInterleaved1F1B", 2, "loop", False),
    "interleaved-zb": ("ScheduleInterleavedZeroBubble", 2, "loop", True),
    "zbv": ("ScheduleZBVZeroBubble", 2, "V", True),
}


def stage_ids(rank: int, p: int, v: int, placement: str = "loop") -> list[int]:
    """Which of the p*v stages rank ``rank`` holds: loop r, r+p, ...; V: r and 2p-1-r."""
    return [k for k in range(p * v) if stage_position(k, p, placement) == rank]


def build_schedule(
    name: str, modules: Sequence[nn.Module], ids: Sequence[int], ctx: Any, m: int, loss_fn: Callable
) -> Any:
    """torch's schedule ``name`` over this rank's stage modules (``modules[i]`` is stage
    ``ids[i]`` of p*v, p = ctx.world_size). Call ``.step(x)`` on the rank holding stage 0,
    ``.step(target=y, losses=[])`` on the one holding the last, ``.step()`` elsewhere."""
    import torch.distributed.pipelining as pipelining

    cls_name, v, _, _ = TORCH_SCHEDULES[name]
    n = ctx.world_size * v
    stages = [
        pipelining.PipelineStage(mod, i, n, ctx.device, group=ctx.group)
        for mod, i in zip(modules, ids)
    ]
    cls = getattr(pipelining, cls_name)
    return cls(stages if v > 1 else stages[0], n_microbatches=m, loss_fn=loss_fn)
