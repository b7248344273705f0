"""Bubble measured from a per-rank timeline, simulated or recorded (lab 07, lab 10).

A timeline is a list of events with ``rank``, ``start`` and ``end`` (dicts or objects, e.g.
``pipeline.Event``). The idle fraction of a rank is what the pipeline bubble looks like in a
real trace; comparing it with ``pipeline.bubble`` closes the loop between formula and run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from lab_utils.calc._check import choice, nonneg_int, number


@dataclass(frozen=True)
class TimelineBubble:
    """Measured idle fraction per rank (idle / window) and its mean and max."""

    per_rank: dict[int, float]
    mean: float
    max: float
    makespan: float


def _field(e: Any, key: str) -> Any:
    if isinstance(e, dict):
        if key not in e:
            raise ValueError(
                f"timeline event {e!r} has no {key!r} key; each event needs "
                "'rank', 'start' and 'end'"
            )
        return e[key]
    if not hasattr(e, key):
        raise ValueError(
            f"timeline event {e!r} has no attribute {key!r}; each event needs rank, start and end"
        )
    return getattr(e, key)


def bubble_from_timeline(events: Iterable[Any], window: str = "global") -> TimelineBubble:
    """Idle fraction of each rank from a (simulated or MEASURED) timeline.

    idle / total, where busy time is the union of the rank's [start, end) intervals (so
    overlapping records are not double counted) and total is the window: "global" = first
    start to last end over ALL ranks (a rank waiting for the pipeline to fill is idle), or
    "rank" = that rank's own first start to last end. Events are dicts or objects with
    rank, start, end. For an ideal GPipe or 1F1B timeline the global value on every rank is
    (p-1)/(m+p-1). Lab 07 feeds recorded per-rank timelines into it.
    """
    choice("window", window, ("global", "rank"))
    if isinstance(events, (str, bytes, dict)) or not hasattr(events, "__iter__"):
        raise ValueError(
            f"events must be a list of timeline events (dicts or objects with "
            f"rank, start, end), got {type(events).__name__}"
        )
    by_rank: dict[int, list[tuple[float, float]]] = {}
    for e in events:
        r = nonneg_int("event rank", _field(e, "rank"))
        s = number("event start", _field(e, "start"), hint="times are seconds (finite)")
        t = number("event end", _field(e, "end"), hint="times are seconds (finite)")
        if t < s:
            raise ValueError(
                f"event on rank {r} ends before it starts ({s} > {t}); "
                "check the clock used to record the timeline"
            )
        by_rank.setdefault(r, []).append((s, t))
    if not by_rank:
        raise ValueError("the timeline is empty; record at least one event per rank")
    t0 = min(s for iv in by_rank.values() for s, _ in iv)
    t1 = max(t for iv in by_rank.values() for _, t in iv)
    if t1 <= t0:
        raise ValueError("the timeline has zero length; events need end > start")
    per_rank = {}
    for r, iv in sorted(by_rank.items()):
        iv.sort()
        busy, cur_s, cur_e = 0.0, iv[0][0], iv[0][1]
        for s, t in iv[1:]:  # merge overlapping intervals
            if s > cur_e:
                busy, cur_s, cur_e = busy + cur_e - cur_s, s, t
            else:
                cur_e = max(cur_e, t)
        busy += cur_e - cur_s
        lo, hi = (t0, t1) if window == "global" else (iv[0][0], max(t for _, t in iv))
        per_rank[r] = 1 - busy / (hi - lo) if hi > lo else 0.0
    vals = list(per_rank.values())
    return TimelineBubble(per_rank, sum(vals) / len(vals), max(vals), t1 - t0)
