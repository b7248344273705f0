"""Lab 07's simulated compute: pad each pipeline operation to a chosen time, watched from outside.

The technique (``lab_utils.parallel.pipeline_parallel``) only runs the operations and their
p2p. ``StageObserver`` is hung on every StageWorker (its ``observer`` hook): it records each
operation's COMPUTE span on a Timeline (never the wait for a message), pads it to its
simulated time, and counts the micro-batches (and autograd-saved bytes) a rank holds.

SIMULATED COMPUTE (``SimCompute``): every forward is padded with a sleep to t_f, every whole
backward to t_b = 2 t_f, and a split backward to T_B = t_b - T_W (B) and T_W = t_b / 2 (W) by
default; with v chunks per rank each op takes 1/v of that. The real compute still runs inside,
so gradients stay exact. Sleeping ranks do not compete for CPU cores, so 4 ranks on 2 cores
measure the SCHEDULE, not the machine. What is left over is real: the p2p latency (a message
takes ~0.5-1.5 ms from one process to another here) and the time a process takes to wake up,
which grows with the machine's load. ``free_p2p=True`` hides the first one, as the bubble
formulas do (they count no communication time): see StageObserver.
"""
from __future__ import annotations

import os
import tempfile
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch
import torch.distributed as dist

from lab_utils.measure import SavedActivations, Timeline
from lab_utils.parallel.pipeline_parallel.stage import StageWorker


@dataclass(frozen=True)
class SimCompute:
    """SIMULATED COMPUTE: pad each forward to t_f and each backward to t_b (default 2 t_f)
    seconds, of which T_W = w_frac * t_b is the weight-gradient part W when a schedule splits
    it (B = the rest); ``stage_cost[r]`` multiplies them on rank r (load imbalance)."""

    t_f: float = 0.02
    t_b: float | None = None
    stage_cost: tuple[float, ...] | None = None
    w_frac: float = 0.5
    free_p2p: bool = False  # hide the p2p latency (see StageObserver)

    def times(self, rank: int) -> tuple[float, float]:
        """(t_f, t_b) on rank ``rank``."""
        k = self.stage_cost[rank] if self.stage_cost else 1.0
        return k * self.t_f, k * (2 * self.t_f if self.t_b is None else self.t_b)

    def op_times(self, rank: int, v: int = 1) -> dict[str, float]:
        """Seconds of each op kind on this rank, per model chunk (v chunks: 1/v each)."""
        t_f, t_b = self.times(rank)
        t_w = self.w_frac * t_b
        return {"F": t_f / v, "BW": t_b / v, "B": (t_b - t_w) / v, "W": t_w / v}


class StageObserver:
    """Watches one rank's StageWorkers from outside (their ``observer`` hook): spans on a
    Timeline, SIMULATED-COMPUTE padding, peak micro-batches and saved bytes in flight.

    ``stamps`` (free-p2p mode): a table in shared memory where each op writes the time its
    output was ready. An op whose input came from a neighbour then starts, on the timeline
    and for its padding, when that input was READY on the sender (or when this rank became
    free, if later), not when the message arrived and this process woke up: the formulas'
    free communication. Its end is real (a slow op still shows); ops fed by nothing (stage
    0's forwards) start when they really start."""

    def __init__(self, timeline: Timeline, chunks: Sequence[StageWorker],
                 times: dict[str, float] | None = None, stamps: Any = None) -> None:
        self.timeline, self.chunks, self.times, self.stamps = timeline, list(chunks), times, stamps
        self.live: dict[tuple[int, int], int] = {}  # (stage, mb) -> bytes autograd saved
        self.peak_in_flight = self.peak_bytes = self.overran = 0
        self.free = 0.0  # when this rank's previous op ended
        for w in self.chunks:
            w.observer = self

    def _slot(self, kind: int, stage: int, mb: int) -> int:
        return (kind * self.chunks[0].n_stages + stage) * self.chunks[0].m + mb

    def _start(self, op: str, mb: int, w: StageWorker) -> float:
        now = self.timeline.now()
        if self.stamps is None:
            return now
        if op == "F" and not w.first:
            ready = self.stamps[self._slot(0, w.stage - 1, mb)].item()
        elif op in ("B", "BW") and not w.last:
            ready = self.stamps[self._slot(1, w.stage + 1, mb)].item()
        else:
            return now
        return min(now, max(self.free, ready))

    @contextmanager
    def __call__(self, op: str, mb: int, w: StageWorker) -> Iterator[None]:
        t0 = self._start(op, mb, w)
        with SavedActivations(w.module) if op == "F" else nullcontext() as acts:
            yield
        if self.times:  # SIMULATED COMPUTE: sleep until the op has lasted its time
            left = t0 + self.times[op] - self.timeline.now()
            if left > 0:
                time.sleep(left)
            else:
                self.overran += 1  # the real compute was slower than the simulated time
        self.free = self.timeline.now()
        if self.stamps is not None and op != "W":  # output ready: before it is sent
            self.stamps[self._slot(op != "F", w.stage, mb)] = self.free
        self.timeline.add("B" if op == "BW" else op, t0, self.free, mb=mb,
                          stage=w.stage, chunk=self.chunks.index(w))
        if op == "F":
            self.live[(w.stage, mb)] = acts.bytes
        self.live = {(k, j): b for (k, j), b in self.live.items()
                     if k != w.stage or j in w.stored}
        self.peak_in_flight = max(self.peak_in_flight, len(self.live))
        self.peak_bytes = max(self.peak_bytes, sum(self.live.values()))


def shared_stamps(ctx: Any, n: int) -> torch.Tensor:
    """n float64 in shared memory, the same on every rank of this machine (collective: rank 0
    creates a file in /dev/shm and broadcasts its name; it is removed once all mapped it)."""
    path = [None]
    if ctx.rank == 0:
        fd, path[0] = tempfile.mkstemp(prefix="lab07_stamps_",
                                       dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.ftruncate(fd, 8 * n)
        os.close(fd)
    dist.broadcast_object_list(path, src=0)
    stamps = torch.from_file(path[0], shared=True, size=n, dtype=torch.float64)
    dist.barrier()
    if ctx.rank == 0:
        os.unlink(path[0])  # the mappings stay valid
    return stamps
