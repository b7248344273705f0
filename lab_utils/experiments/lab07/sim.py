"""Lab 07's observer of the StageWorkers, on the emulated clock.

The technique (``lab_utils.parallel.pipeline_parallel``) only runs the operations and their
p2p. ``StageObserver`` is hung on every StageWorker (its ``observer`` hook): it records each
operation's COMPUTE span on a Timeline (never the wait for a message) and counts the
micro-batches (and autograd-saved bytes) a rank holds. Under ``lab_utils.twin`` (lab 07's
timelines) the span's times are EMULATED seconds: the compute charged from the FLOPs the stage
really ran, the waits from the p2p messages on the cluster's links; nothing sleeps. Outside it
they are this machine's wall clock.

(The slept "simulated compute" that once padded each op to a chosen time is gone: the emulated
cluster is the course's one model of time.)
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Iterator, Sequence

from lab_utils import twin
from lab_utils.measure import SavedActivations, Timeline
from lab_utils.parallel.pipeline_parallel.stage import StageWorker


class StageObserver:
    """Watches one rank's StageWorkers from outside (their ``observer`` hook): spans on a
    Timeline (emulated seconds under the twin), peak micro-batches and saved bytes in flight."""

    def __init__(self, timeline: Timeline, chunks: Sequence[StageWorker]) -> None:
        self.timeline, self.chunks = timeline, list(chunks)
        self.live: dict[tuple[int, int], int] = {}  # (stage, mb) -> bytes autograd saved
        self.peak_in_flight = self.peak_bytes = 0
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
        self.timeline.add(
            "B" if op == "BW" else op,
            t0,
            self.now(),
            mb=mb,
            stage=w.stage,
            chunk=self.chunks.index(w),
        )
        if op == "F":
            self.live[(w.stage, mb)] = acts.bytes
        self.live = {(k, j): b for (k, j), b in self.live.items() if k != w.stage or j in w.stored}
        self.peak_in_flight = max(self.peak_in_flight, len(self.live))
        self.peak_bytes = max(self.peak_bytes, sum(self.live.values()))
