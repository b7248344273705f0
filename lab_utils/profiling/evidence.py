"""The numbers a diagnosis rests on, read from one run's trace files (lab 13, the exercise).

``evidence(files)`` condenses every rank's trace into one ``Evidence``: what the overlap
reading says (``reading.read``), who is slow, and how often tell-tale events occur per step:

    overlap_fraction      mean over ranks of overlapped / communication time
    exposed_ms            mean exposed communication per rank and step
    all_reduces_per_step  gloo all-reduces rank 0 ran per step (one per bucket)
    gap_ms, gap_cause     the longest idle gap of any rank, and what it was spent on
    slowest_rank          the rank with the most compute time; compute_spread = max / min
    loader_ms_per_step    time rank 0 spent inside the DataLoader's ``enumerate(DataLoader)``
    item_calls_per_step   ``aten::item`` calls of rank 0 per step: host syncs (a GPU's CPU
                          waits at each one for the device queue to drain)
    compiles_per_step     Dynamo compilations per step (``entire_frame_compile`` events)
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.profiling.load import TraceFile
from lab_utils.profiling.reading import read
from lab_utils.profiling.timeline import rank_timelines, union

FIELDS = (
    "overlap_fraction",
    "exposed_ms",
    "all_reduces_per_step",
    "gap_ms",
    "gap_cause",
    "slowest_rank",
    "compute_spread",
    "loader_ms_per_step",
    "item_calls_per_step",
    "compiles_per_step",
)


@dataclass(frozen=True)
class Evidence:
    step_ms: float
    overlap_fraction: float
    exposed_ms: float
    all_reduces_per_step: float
    gap_ms: float
    gap_rank: int
    gap_cause: str
    slowest_rank: int
    compute_spread: float
    loader_ms_per_step: float
    item_calls_per_step: float
    compiles_per_step: float

    def rows(self) -> list[tuple[str, str]]:
        """(field, value) for a table."""
        return [
            (
                k,
                f"{getattr(self, k):.3g}"
                if isinstance(getattr(self, k), float)
                else str(getattr(self, k)),
            )
            for k in ("step_ms",) + FIELDS
        ]


def _count(f: TraceFile, prefix: str) -> int:
    return sum(1 for e in f.events if e["name"].startswith(prefix))


def evidence(files: list[TraceFile]) -> Evidence:
    timelines = rank_timelines(files)
    readings = read(timelines)
    n = len(readings)
    steps = max(1, len(timelines[0].steps))
    worst = max(readings, key=lambda r: r.gap[1] - r.gap[0])
    compute = {r.rank: r.compute_s for r in readings}
    first = min(files, key=lambda f: f.rank or 0)
    t0 = timelines[0]
    loader = union([o for o in t0.other if o[2].startswith("enumerate(DataLoader)")])
    return Evidence(
        step_ms=1e3 * sum(r.step_s for r in readings) / n,
        overlap_fraction=sum(r.overlap_fraction for r in readings) / n,
        exposed_ms=1e3 * sum(r.exposed_s for r in readings) / n / steps,
        all_reduces_per_step=_count(first, "gloo:all_reduce") / steps,
        gap_ms=1e3 * (worst.gap[1] - worst.gap[0]),
        gap_rank=worst.rank,
        gap_cause=worst.gap_cause,
        slowest_rank=max(compute, key=compute.get),
        compute_spread=max(compute.values()) / max(1e-12, min(compute.values())),
        loader_ms_per_step=1e3 * sum(b - a for a, b in loader) / steps,
        item_calls_per_step=_count(first, "aten::item") / steps,
        compiles_per_step=_count(first, "entire_frame_compile") / steps,
    )
