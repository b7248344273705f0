"""An emulated run's timeline: events for the Gantt view, idle gaps, and a Chrome trace JSON.

``timeline_events`` gives dicts ``{rank, name, start, end, lane}`` (lane = the stream:
"compute", "comm", "p2p", "io"; idle gaps of the compute stream are events named "idle"), which
``lab_utils.viz.gantt.gantt_figure`` draws with one row per rank and stream. ``chrome_trace``
writes the Trace Event Format that Perfetto (ui.perfetto.dev) and chrome://tracing open: one
process per rank, one thread per stream, times in microseconds of EMULATED time.
"""

from __future__ import annotations

import json
from typing import Any

from lab_utils.twin.result import Emulation

STREAMS = ("compute", "comm", "p2p", "io")


def idle_gaps(spans: list[dict], rank: int, end: float) -> list[dict]:
    """Gaps of ``rank``'s compute stream between time 0 and ``end`` (waiting on comm or peers)."""
    busy = sorted(
        (s["start"], s["end"]) for s in spans if s["rank"] == rank and s["stream"] == "compute"
    )
    gaps, t = [], 0.0
    for a, b in busy + [(end, end)]:
        if a > t:
            gaps.append(dict(rank=rank, name="idle", start=t, end=a, lane="compute"))
        t = max(t, b)
    return gaps


def timeline_events(em: Emulation, idle: bool = True) -> list[dict]:
    """Every span of every rank as a Gantt event (plus idle gaps of the compute stream)."""
    out = [
        dict(
            rank=s["rank"],
            name=s["name"],
            start=s["start"],
            end=s["end"],
            lane=s["stream"],
            bytes=s["bytes"],
            flops=s["flops"],
        )
        for s in em.spans
    ]
    if idle:
        for rec in em.records:
            out += idle_gaps(em.spans, rec.rank, rec.end)
    return out


def figure(em: Emulation, title: str = "") -> Any:
    """The emulated timeline drawn by the course's Gantt view (plotly figure)."""
    from lab_utils.viz.gantt import gantt_figure

    title = title or f"emulated timeline on {em.cluster.name} (emulated seconds)"
    return gantt_figure(timeline_events(em), title=title, time_unit="emulated s", relative=False)


def chrome_trace(em: Emulation, path: str | None = None) -> dict:
    """The run as a Chrome trace (dict); written as JSON to ``path`` when given."""
    events: list[dict] = []
    for rec in em.records:
        events.append(
            dict(
                name="process_name",
                ph="M",
                pid=rec.rank,
                args=dict(name=f"rank {rec.rank} (node {em.cluster.node_of(rec.rank)})"),
            )
        )
        for tid, stream in enumerate(STREAMS):
            events.append(
                dict(name="thread_name", ph="M", pid=rec.rank, tid=tid, args=dict(name=stream))
            )
    for s in em.spans:
        events.append(
            dict(
                name=s["name"],
                ph="X",
                pid=s["rank"],
                tid=STREAMS.index(s["stream"]),
                ts=s["start"] * 1e6,
                dur=(s["end"] - s["start"]) * 1e6,
                args=dict(bytes=s["bytes"], flops=s["flops"]),
            )
        )
    trace = dict(
        traceEvents=events,
        displayTimeUnit="ns",
        otherData=dict(cluster=em.cluster.name, clock="emulated", scale=em.scale.name),
    )
    if path is not None:
        with open(path, "w") as f:
            json.dump(trace, f)
    return trace
