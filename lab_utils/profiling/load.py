"""Read Chrome trace files (the profiler's and the emulated cluster's), with clear refusals.

Two producers write the Trace Event Format the course reads:
  * ``torch.profiler`` (Kineto): one file per rank, ``schemaVersion`` and ``distributedInfo``
    (backend, rank, world size) at the top, times in microseconds of this machine's clock;
  * ``lab_utils.twin.chrome_trace``: ONE file for the whole emulated run, one process per rank,
    one thread per stream (compute, comm, p2p), times in microseconds of EMULATED time.

``load_trace(path)`` returns a ``TraceFile``: its complete events (``ph == "X"``), the thread
names, the rank (from ``distributedInfo``; None for the emulator's file; 0 for a profile taken
outside torch.distributed), which producer wrote it, and the memory counter when the profile
recorded memory. It refuses, naming the file and what is missing: a file that does not exist,
a truncated file (JSON cut short: the profiler was killed while exporting), a file that is not
a Chrome trace (no ``traceEvents``), a profiler trace without ``schemaVersion`` (another torch
version's format, or another tool), and an empty profile (no operator ran between start and
stop: the profiler started after the step).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field


class TraceError(ValueError):
    """A trace file this reader cannot use; the message names the file and what is missing."""


@dataclass
class TraceFile:
    path: str
    producer: str  # "torch.profiler" or "twin" (emulated)
    rank: int | None  # None: a twin file holds every rank
    events: list[dict]  # complete events (ph "X"): name, ts, dur (us), pid, tid
    threads: dict[tuple, str] = field(default_factory=dict)  # (pid, tid) -> thread name
    info: dict = field(default_factory=dict)  # the producer's header fields
    memory: list[tuple[float, int]] = field(default_factory=list)
    # (ts us, "Total Allocated" bytes) of each "[memory]" event (profile_memory=True): bytes
    # allocated since the profiler started, net of the frees it saw


def _read_json(path: str) -> dict:
    if not os.path.exists(path):
        raise TraceError(
            f"{path}: no such trace file (was the run's trace folder already "
            "removed, or did the rank fail before exporting?)"
        )
    with open(path) as f:
        text = f.read()
    if not text.strip():
        raise TraceError(f"{path}: the file is empty (0 bytes of JSON)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(
            f"{path}: truncated or corrupt JSON ({exc.msg} at character "
            f"{exc.pos} of {len(text)}): the export did not finish"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(
            f"{path}: not a Chrome trace: the top-level object has no 'traceEvents' list"
        )
    return data


def _producer(path: str, data: dict) -> str:
    if data.get("otherData", {}).get("clock") == "emulated":
        return "twin"
    if "schemaVersion" not in data:
        raise TraceError(
            f"{path}: a Chrome trace, but not one torch.profiler 2.x wrote: it "
            "lacks 'schemaVersion' (another torch version, or another tool)"
        )
    return "torch.profiler"


def load_trace(path: str) -> TraceFile:
    """Read and validate one trace file (see the module's docstring for the refusals)."""
    data = _read_json(path)
    producer = _producer(path, data)
    complete, threads, memory = [], {}, []
    for e in data["traceEvents"]:
        if e.get("name") == "[memory]" and "Total Allocated" in e.get("args", {}):
            memory.append((float(e["ts"]), int(e["args"]["Total Allocated"])))
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e.get("pid"), e.get("tid"))] = str(e.get("args", {}).get("name", ""))
        elif e.get("ph") == "X" and e.get("cat") != "Trace":  # "Trace": the profiler's frame
            bad = [k for k in ("name", "ts", "dur", "tid") if k not in e]
            if bad:
                raise TraceError(f"{path}: event {str(e)[:80]} lacks {bad}")
            complete.append(e)
    if not complete:
        raise TraceError(
            f"{path}: an empty profile: no operator ran while the profiler was "
            "recording (was it started after the step, or stopped before it?)"
        )
    rank = None
    if producer == "torch.profiler":  # a profile outside torch.distributed: one process, rank 0
        rank = data.get("distributedInfo", {}).get("rank", 0)
    info = {k: v for k, v in data.items() if k != "traceEvents"}
    return TraceFile(path, producer, rank, complete, threads, info, memory)


def load_traces(paths: list[str]) -> list[TraceFile]:
    """Load several files (one per rank); refuses two files claiming the same rank."""
    files = [load_trace(p) for p in paths]
    seen: dict[int, str] = {}
    for f in files:
        if f.rank is not None and f.rank in seen:
            raise TraceError(
                f"{f.path} and {seen[f.rank]} both claim rank {f.rank}: files "
                "from two different runs?"
            )
        if f.rank is not None:
            seen[f.rank] = f.path
    return files
