"""Profiling (lab 13): real traces of real multi-rank steps, read by a program.

    capture   profiled_steps (torch.profiler around steps on a rank, one Chrome trace per rank),
              trace_folder (a temporary folder, removed after)
    load      load_trace / load_traces: read and validate trace files (the profiler's, and the
              emulated cluster's from lab_utils.twin.chrome_trace); TraceError names the file
    timeline  rank_timelines: each rank's compute / communication / annotations and steps, read
              from the trace files only; union / gaps / intersection of intervals
    reading   read: exposed vs overlapped communication, overlap fraction, idle, the longest
              idle gap and its cause; gantt_events / figure: the merged per-rank timeline
    evidence  Evidence: one run's traces condensed into the numbers a diagnosis rests on

Open a trace file in Perfetto: https://ui.perfetto.dev, "Open trace file" (or drag the .json
onto the page); chrome://tracing reads the same files.
"""

from lab_utils.profiling.capture import profiled_steps, trace_folder, trace_path
from lab_utils.profiling.evidence import FIELDS, Evidence, evidence
from lab_utils.profiling.load import TraceError, TraceFile, load_trace, load_traces
from lab_utils.profiling.reading import Reading, figure, gantt_events, read
from lab_utils.profiling.timeline import RankTimeline, rank_timelines

__all__ = [
    "FIELDS",
    "Evidence",
    "RankTimeline",
    "Reading",
    "TraceError",
    "TraceFile",
    "evidence",
    "figure",
    "gantt_events",
    "load_trace",
    "load_traces",
    "profiled_steps",
    "rank_timelines",
    "read",
    "trace_folder",
    "trace_path",
]
