"""Lab 07's observer of the StageWorkers, on the emulated clock (and lab 10's slept compute).

The technique (``lab_utils.parallel.pipeline_parallel``) only runs the operations and their
p2p. ``StageObserver`` is hung on every StageWorker (its ``observer`` hook): it records each
operation's COMPUTE span on a Timeline (never the wait for a message) and counts the
micro-batches (and autograd-saved bytes) a rank holds. Under ``lab_utils.twin`` (lab 07's
timelines) the span's times are EMULATED seconds: the compute charged from the FLOPs the stage
really ran, the waits from the p2p messages on the cluster's links; nothing sleeps. Outside it
they are this machine's wall clock.

``SimCompute`` (SIMULATED COMPUTE: every forward padded with a sleep to t_f, every backward to
t_b) is kept only for lab 10's pipeline curve, which another change moves to the emulator.
"""
from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Iterator, Sequence

from lab_utils import twin
from lab_utils.measure import SavedActivations, Timeline
from lab_utils.parallel.pipeline_parallel.stage import StageWorker


@dataclass(frozen=True)
class SimCompute:
    """SIMULATED COMPUTE (lab 10 only): pad each forward to t_f and each backward to t_b
    (default 2 t_f) seconds, of which T_W = w_frac * t_b is the weight-gradient part W when a
    schedule splits it (B = the rest)."""

    t_f: float = 0.02
    t_b: float | None = None
    w_frac: float = 0.5

    def op_times(self, v: int = 1) -> dict[str, float]:
        """Seconds of each op kind, per model chunk (v chunks: 1/v each)."""
        t_b = 2 * self.t_f if self.t_b is None else self.t_b
        t_w = self.w_frac * t_b
        return {"F": self.t_f / v, "BW": t_b / v, "B": (t_b - t_w) / v, "W": t_w / v}


class StageObserver:
    """Watches one rank's StageWorkers from outside (their ``observer`` hook): spans on a
    Timeline (emulated seconds under the twin), peak micro-batches and saved bytes in flight,
    and (``times``: lab 10's SIMULATED COMPUTE) a sleep that pads each op to its time."""

    def __init__(self, timeline: Timeline, chunks: Sequence[StageWorker],
                 times: dict[str, float] | None = None) -> None:
        self.timeline, self.chunks, self.times = timeline, list(chunks), times
        self.live: dict[tuple[int, int], int] = {}  # (stage, mb) -> bytes autograd saved
        self.peak_in_flight = self.peak_bytes = self.overran = 0
        for w in self.chunks:
            w.observer = self

    def now(self) -> float:
        """Emulated seconds on the twin (``lab_utils.twin``), else the timeline's wall clock."""
        t = twin.now()
        return self.timeline.now() if t is None else t

    @contextmanager
    def __call__(self, op: str, mb: int, w: StageWorker) -> Iterator[None]:
        t0 = self.now()
        with SavedActivations(w.module) if op == "F" else nullcontext() as acts:
            yield
        if self.times:  # SIMULATED COMPUTE: sleep until the op has lasted its time
            left = t0 + self.times[op] - self.now()
            if left > 0:
                time.sleep(left)
            else:
                self.overran += 1  # the real compute was slower than the simulated time
        self.timeline.add("B" if op == "BW" else op, t0, self.now(), mb=mb,
                          stage=w.stage, chunk=self.chunks.index(w))
        if op == "F":
            self.live[(w.stage, mb)] = acts.bytes
        self.live = {(k, j): b for (k, j), b in self.live.items()
                     if k != w.stage or j in w.stored}
        self.peak_in_flight = max(self.peak_in_flight, len(self.live))
        self.peak_bytes = max(self.peak_bytes, sum(self.live.values()))
