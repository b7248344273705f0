"""Split each rank's trace into compute, communication and idle, on one time axis.

The classification reads only the trace files (``load.TraceFile``), never the course's own
spans:
  * torch.profiler: the rank's MAIN thread is the thread with the most operator events; its
    operators (``cat == "cpu_op"``) are COMPUTE, except collective launches (``c10d::*``).
    COMMUNICATION is what gloo's worker threads record while a collective runs (``gloo:*``
    annotations, e.g. ``gloo:all_reduce``), plus the launches on the main thread. Steps are the
    profiler's ``ProfilerStep#k`` annotations.
  * the emulator's trace (twin): the "compute" thread is compute, "comm" and "p2p" are
    communication, the whole run is one window.
IDLE is every moment of the rank's window where no compute operator runs: waiting for a
collective, for a slower rank, for data, or the Python between operators.
Times are seconds from the earliest event of all ranks (ranks on one machine share its clock;
the emulator's ranks share the emulated clock).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lab_utils.profiling.load import TraceFile

Interval = tuple[float, float, str]  # (start s, end s, name)


@dataclass
class RankTimeline:
    rank: int
    clock: str  # "wall (this machine)" or "emulated"
    compute: list[Interval]
    comm: list[Interval]
    other: list[Interval] = field(default_factory=list)  # annotations: data loading, ...
    steps: list[tuple[float, float]] = field(default_factory=list)
    source: str = ""

    @property
    def window(self) -> tuple[float, float]:
        if self.steps:
            return self.steps[0][0], self.steps[-1][1]
        spans = self.compute + self.comm
        return min(s for s, _, _ in spans), max(e for _, e, _ in spans)


def _main_tid(events: list[dict]):
    counts: dict = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            counts[e["tid"]] = counts.get(e["tid"], 0) + 1
    return max(counts, key=counts.get) if counts else None


def _span(e: dict, t0: float) -> Interval:
    start = (e["ts"] - t0) * 1e-6
    return start, start + e["dur"] * 1e-6, e["name"]


def _from_profiler(f: TraceFile, t0: float) -> RankTimeline:
    main = _main_tid(f.events)
    compute, comm, other, steps = [], [], [], []
    for e in f.events:
        name, on_main = e["name"], e["tid"] == main
        if name.startswith("PythonDispatchMode"):  # a dispatch mode's frame, not an operator
            continue
        if name.startswith("gloo:") or (on_main and name.startswith("c10d::")):
            comm.append(_span(e, t0))
        elif name.startswith("ProfilerStep#"):
            steps.append(_span(e, t0)[:2])
        elif on_main and e.get("cat") == "cpu_op":
            compute.append(_span(e, t0))
        elif on_main and e.get("cat") == "user_annotation":
            other.append(_span(e, t0))
    return RankTimeline(
        f.rank,
        "wall (this machine)",
        sorted(compute),
        sorted(comm),
        sorted(other),
        sorted(steps),
        f.path,
    )


def _from_twin(f: TraceFile, t0: float) -> list[RankTimeline]:
    out = []
    for pid in sorted({e["pid"] for e in f.events}):
        mine = [e for e in f.events if e["pid"] == pid]
        lane = {e["tid"]: f.threads.get((pid, e["tid"]), "") for e in mine}
        compute = [_span(e, t0) for e in mine if lane[e["tid"]] == "compute"]
        comm = [_span(e, t0) for e in mine if lane[e["tid"]] in ("comm", "p2p")]
        out.append(RankTimeline(int(pid), "emulated", sorted(compute), sorted(comm), source=f.path))
    return out


def rank_timelines(files: list[TraceFile]) -> list[RankTimeline]:
    """One RankTimeline per rank, sorted by rank, on a common time axis (seconds)."""
    t0 = min(e["ts"] for f in files for e in f.events)
    out: list[RankTimeline] = []
    for f in files:
        out += _from_twin(f, t0) if f.producer == "twin" else [_from_profiler(f, t0)]
    return sorted(out, key=lambda t: t.rank)


def union(
    spans: list[Interval], lo: float = float("-inf"), hi: float = float("inf")
) -> list[tuple[float, float]]:
    """The spans merged into disjoint intervals, clipped to [lo, hi]."""
    out: list[list[float]] = []
    for s, e, _ in sorted(spans):
        s, e = max(s, lo), min(e, hi)
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def gaps(busy: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """The complement of disjoint sorted ``busy`` intervals inside [lo, hi]."""
    out, t = [], lo
    for s, e in busy:
        if s > t:
            out.append((t, s))
        t = max(t, e)
    return out + ([(t, hi)] if hi > t else [])


def intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two disjoint sorted interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
