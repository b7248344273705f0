"""Record a real trace: torch.profiler around training steps on a rank, one file per rank.

    with trace_folder() as folder:                      # a temporary folder, removed after
        paths = run(worker, 4, folder)     # each rank calls profiled_steps(ctx.rank, folder, ...)
        traces = load_traces(paths)                     # lab_utils.profiling.load

``profiled_steps`` runs ``step()`` under ``torch.profiler.profile`` (CPU activity: gloo ranks have
no GPU), marks each step with ``prof.step()`` (the trace then holds one ``ProfilerStep#k`` span
per step), and writes the Chrome trace ``<folder>/<name>_rank<r>.json`` (Kineto's format: what
Perfetto, chrome://tracing and HTA open). Warm-up steps run before the profiler starts, and one more
under the profiler's own warm-up (not recorded), so the trace holds steady-state steps only:
``step`` is called ``warmup + 1 + steps`` times.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from torch.profiler import ProfilerActivity, profile, schedule


def trace_path(folder: str, name: str, rank: int) -> str:
    """Where rank ``rank``'s trace of run ``name`` goes."""
    return os.path.join(folder, f"{name}_rank{rank}.json")


def profiled_steps(
    rank: int,
    folder: str,
    name: str,
    step: Callable[[int], Any],
    steps: int,
    warmup: int = 1,
    memory: bool = False,
) -> str:
    """Run ``step(i)`` ``warmup`` times unprofiled, then ``steps`` times under the profiler;
    export this rank's Chrome trace and return its path. ``memory``: also record every
    allocation and free (``profile_memory=True``: the memory timeline of section 3)."""
    for i in range(warmup):
        step(i)
    path = trace_path(folder, name, rank)
    # a schedule makes prof.step() record a ProfilerStep#k span around each step; the trace is
    # written when the last active step ends
    with profile(
        activities=[ProfilerActivity.CPU],
        profile_memory=memory,
        record_shapes=False,
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(path),
    ) as prof:
        for i in range(warmup, warmup + 1 + steps):  # + 1: the profiler's own warm-up step
            step(i)
            prof.step()
    return path


@contextmanager
def trace_folder(prefix: str = "lab13_traces_") -> Iterator[str]:
    """A temporary folder for trace files, removed (with every trace in it) on exit."""
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
