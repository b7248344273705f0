"""Helpers the labs' experiments share, in one place: this rank's batches, the mean over ranks,
plain SGD written out (and its steps marked on the emulated clock), a span that times nothing,
the clock a rank runs on (emulated or wall) and one window of an emulated run.

Each runs on a rank (inside a function launched with ``lab_utils.run``) and uses the rank's own
group; none holds state.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import nn

from lab_utils import twin
from lab_utils.data import shard_for_rank, token_batches
from lab_utils.models import GPTConfig, lm_loss


def rank_batches(
    ctx: Any, cfg: GPTConfig, batch_per_rank: int, steps: int, seed: int = 1
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's shard of each global batch (token_batches(..., seed) is the same everywhere)."""
    n = ctx.world_size
    batches = token_batches(steps, batch_per_rank * n, cfg.seq_len, cfg.vocab_size, seed=seed)
    return [shard_for_rank(b, ctx.rank, n) for b in batches]


def marked_sgd_steps(model: nn.Module, forward: Any, batches: Any) -> list[float]:
    """One step per (x, y) batch: ``lm_loss(forward(x), y)``, backward, ``sgd_step(model)``,
    then ``twin.step()`` (a step mark on the emulated clock; nothing outside an emulated run).
    ``forward`` is the wrapped model (DDP, FSDP2). Returns this rank's losses."""
    from lab_utils import twin

    losses = []
    for x, y in batches:
        loss = lm_loss(forward(x), y)
        loss.backward()
        sgd_step(model)
        losses.append(loss.item())
        twin.step()
    return losses


def mean_over_ranks(values: list[float], group: Any) -> list[float]:
    """Mean over the group's ranks of per-rank values, in float64 (equal shards: the global
    batch's mean loss)."""
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.AVG, group=group)
    return t.tolist()


def sgd_step(model: nn.Module, lr: float = 0.1) -> None:
    """Plain SGD, written out, then the gradients dropped: the first torch.optim optimizer a
    process builds imports the compiler stack (torch._dynamo, ~1.5 s per rank), which would
    dwarf these tiny steps."""
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)
                p.grad = None


@contextlib.contextmanager
def no_span(name: str) -> Iterator[None]:
    """A span that times nothing: the default of a step that can be timed (``span("forward")``)."""
    yield


def clock_now() -> float:
    """Seconds on the clock this rank runs on: the emulated cluster's inside ``twin.emulate``,
    this machine's wall clock (``time.perf_counter``) otherwise. A worker timed with it runs
    unchanged on both clocks."""
    t = twin.now()
    return time.perf_counter() if t is None else t


def emulated_window(em: twin.Emulation, bounds: list) -> twin.Emulation:
    """One window of an emulated run as an Emulation of its own: rank r's spans that start in
    ``bounds[r] = (start, end)`` (its emulated clock), shifted to start at 0 (``twin.figure``
    draws it; ``busy`` and ``overlap`` measure it)."""
    recs = []
    for rec, (a, b) in zip(em.records, bounds):
        spans = [
            dict(s, start=s["start"] - a, end=s["end"] - a)
            for s in rec.spans
            if a <= s["start"] < b
        ]
        recs.append(replace(rec, spans=spans, steps=[b - a], end=b - a))
    return twin.Emulation(em.cluster, em.scale, recs)
