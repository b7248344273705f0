"""What a trace says: exposed vs overlapped communication, idle time, the longest gap and who
caused it, per rank, computed from ``timeline.RankTimeline`` (the trace files, not our spans).

    overlapped = |comm ∩ compute|        a collective runs AND an operator runs
    exposed    = |comm| - overlapped     a collective runs and no operator does
    overlap fraction = overlapped / |comm|
    idle       = window - |compute|      no operator runs (waiting, Python, data)
All four are lengths of unions of intervals inside the rank's window (its profiled steps).
The longest idle gap is explained by what covers it: a collective (then: which rank arrived
last at that collective, the one the others waited for), an annotation such as the data
loader's ``enumerate(DataLoader)``, or nothing (host time: Python, a sleep, a host sync).
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.profiling.timeline import RankTimeline, gaps, intersection, union


@dataclass
class Reading:
    rank: int
    clock: str
    step_s: float  # window / number of steps (mean step time)
    compute_s: float
    comm_s: float
    overlapped_s: float
    exposed_s: float
    idle_s: float
    gap: tuple[float, float]  # the longest idle gap (start, end), seconds
    gap_cause: str

    @property
    def overlap_fraction(self) -> float:
        return self.overlapped_s / self.comm_s if self.comm_s > 0 else 0.0


def _arrival(t: RankTimeline, k: int) -> float | None:
    """When rank ``t`` reached its k-th collective: the collective's start in a profiler trace
    (gloo starts it when the rank launches it); in the emulator's trace every rank's collective
    starts together, so the end of its last compute before the collective."""
    comm = [c for c in t.comm if not c[2].startswith("c10d::")]
    if k >= len(comm):
        return None
    start = comm[k][0]
    if t.clock != "emulated":
        return start
    ends = [e for _, e, _ in t.compute if e <= start + 1e-12]
    return max(ends) if ends else start


def _covered(spans: list, a: float, b: float) -> float:
    return sum(max(0.0, min(b, e) - max(a, s)) for s, e, _ in spans)


def _cause(t: RankTimeline, gap: tuple[float, float], everyone: list[RankTimeline]) -> str:
    a, b = gap
    comm = [c for c in t.comm if not c[2].startswith("c10d::")]
    if comm and _covered(comm, a, b) > 0.5 * (b - a):  # collectives fill most of the gap
        best = max(comm, key=lambda c: min(b, c[1]) - max(a, c[0]))
        k = comm.index(best)
        if best[2] in ("gloo:send", "gloo:recv"):  # point-to-point: no k-th match across ranks
            return (
                f"waiting in {best[2]} #{k}: a pipeline neighbour was not ready (the "
                "bubble, or a slower stage)"
            )
        arrivals = {o.rank: _arrival(o, k) for o in everyone}
        arrivals = {r: x for r, x in arrivals.items() if x is not None}
        last = max(arrivals, key=arrivals.get)
        if last != t.rank and arrivals[last] - arrivals[t.rank] > 0.3 * (b - a):
            late = (arrivals[last] - min(arrivals.values())) * 1e3
            return (
                f"waiting in {best[2]} #{k} for rank {last}, which reached it "
                f"{late:.1f} ms after the first rank"
            )
        return f"{best[2]} #{k} itself: the transfer, exposed (no compute to hide it behind)"
    cover = [
        o
        for o in t.other
        if min(b, o[1]) - max(a, o[0]) > 0.5 * (b - a) and not o[2].startswith("ProfilerStep")
    ]
    if cover:
        return f"inside {min(cover, key=lambda o: o[1] - o[0])[2]} (no operator ran)"
    return "no operator and no collective: host time (Python, a sleep, a host-side wait)"


def read(timelines: list[RankTimeline]) -> list[Reading]:
    """One Reading per rank (see the module's docstring for the definitions)."""
    out = []
    for t in timelines:
        lo, hi = t.window
        comp, comm = union(t.compute, lo, hi), union(t.comm, lo, hi)
        comm_s = sum(e - s for s, e in comm)
        both = intersection(comp, comm)
        compute_s = sum(e - s for s, e in comp)
        idle = gaps(comp, lo, hi)
        gap = max(idle, key=lambda g: g[1] - g[0], default=(lo, lo))
        out.append(
            Reading(
                t.rank,
                t.clock,
                (hi - lo) / max(1, len(t.steps)),
                compute_s,
                comm_s,
                both,
                comm_s - both,
                (hi - lo) - compute_s,
                gap,
                _cause(t, gap, timelines) if gap[1] > gap[0] else "no idle gap",
            )
        )
    return out


def gantt_events(timelines: list[RankTimeline], min_gap_frac: float = 0.01) -> list[dict]:
    """Bars for ``viz.gantt``: per rank a "compute" lane (compute, and idle gaps) and a "comm"
    lane. Compute gaps shorter than ``min_gap_frac`` of the window are drawn filled (hundreds
    of operators a few microseconds apart would be unreadable); the numbers of ``read`` use
    the exact intervals."""
    out = []
    for t in timelines:
        lo, hi = t.window
        tol = min_gap_frac * (hi - lo)
        merged: list[list[float]] = []
        for s, e in union(t.compute, lo, hi):
            if merged and s - merged[-1][1] <= tol:
                merged[-1][1] = e
            else:
                merged.append([s, e])
        out += [
            dict(rank=t.rank, name="compute", start=s, end=e, lane="compute") for s, e in merged
        ]
        out += [
            dict(rank=t.rank, name="idle", start=s, end=e, lane="compute")
            for s, e in gaps([(a, b) for a, b in merged], lo, hi)
        ]
        out += [
            dict(rank=t.rank, name="comm", start=s, end=e, lane="comm")
            for s, e in union(t.comm, lo, hi)
        ]
    return out


def figure(timelines: list[RankTimeline], title: str = ""):
    """The merged per-rank timeline (plotly), drawn by the course's Gantt view."""
    from lab_utils.viz.gantt import gantt_figure

    unit = "emulated s" if timelines and timelines[0].clock == "emulated" else "s (wall)"
    return gantt_figure(gantt_events(timelines), title=title, time_unit=unit)
