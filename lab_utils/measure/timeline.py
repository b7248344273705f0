"""Per-rank timeline of named spans, gathered to rank 0 on a common clock (labs 04, 07, 10).

    tl = Timeline(ctx)
    with tl.span("forward", mb=0, stage=ctx.rank):
        ...
    events = tl.gather()      # collective; rank 0 gets [{rank, name, start, end, **meta}]

Clock: time.perf_counter() is CLOCK_MONOTONIC on Linux, one clock for every process of a
machine, so spans from different ranks line up directly; rank 0 shifts them so the earliest
start is 0. Across machines the clocks differ: with ``align="barrier"`` (the default when
the job spans several nodes) every rank instead measures from the moment it left a barrier
in ``Timeline(ctx)``, which lines the ranks up to within the barrier's skew.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator


class Timeline:
    """Records spans on one rank; ``gather`` collects every rank's spans on rank 0."""

    def __init__(self, ctx: Any = None, align: str = "auto") -> None:
        if align not in ("auto", "clock", "barrier"):
            raise ValueError(f"align must be 'auto', 'clock' or 'barrier', not {align!r}")
        self.ctx = ctx
        self.rank = getattr(ctx, "rank", 0)
        self.events: list[dict] = []
        multi_node = ctx is not None and getattr(ctx, "local_world_size", 1) < ctx.world_size
        self.align = ("barrier" if multi_node else "clock") if align == "auto" else align
        self._t0 = 0.0
        if self.align == "barrier" and ctx is not None:
            import torch.distributed as dist

            dist.barrier(group=ctx.group)  # collective: every rank builds its Timeline here
            self._t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._t0

    @contextlib.contextmanager
    def span(self, name: str, **meta: Any) -> Iterator[None]:
        """Record [start, end) of the block as ``name`` with extra fields (mb=, stage=, ...)."""
        start = self.now()
        try:
            yield
        finally:
            self.add(name, start, self.now(), **meta)

    def add(self, name: str, start: float, end: float, **meta: Any) -> None:
        """Record a span measured elsewhere (times from ``now()``)."""
        self.events.append({"rank": self.rank, "name": name, "start": start, "end": end, **meta})

    def gather(self, dst: int = 0) -> list[dict] | None:
        """Collective: rank ``dst`` gets every rank's spans sorted by start, times in seconds
        from the earliest start; other ranks get None. Sends each rank's span list (a few
        hundred bytes per span) to ``dst`` with gather_object."""
        if self.ctx is None or self.ctx.world_size == 1:
            return _shift(list(self.events))
        import torch.distributed as dist

        bucket: list | None = [None] * self.ctx.world_size if self.rank == dst else None
        dist.gather_object(self.events, bucket, dst=dst, group=self.ctx.group)
        if bucket is None:
            return None
        return _shift([e for events in bucket for e in events])


def _shift(events: list[dict]) -> list[dict]:
    if not events:
        return events
    t0 = min(e["start"] for e in events)
    out = [{**e, "start": e["start"] - t0, "end": e["end"] - t0} for e in events]
    return sorted(out, key=lambda e: (e["start"], e["rank"]))
