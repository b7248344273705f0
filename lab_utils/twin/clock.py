"""One rank's virtual clock: a compute stream, a communication stream, nothing sleeps (issue 35).

Rules (each is a line below, checked by hand-computed cases in tests/test_twin_clock.py):
* compute of t seconds runs on the compute stream: [now, now + t), then now += t;
* a collective is READY on a rank at max(now, comm stream free); it STARTS at the latest ready
  time of its participants (the caller finds that maximum, possibly later: ``defer``) and
  occupies the comm stream for its cost; the rank does not wait for it unless it waits on
  the work (``wait``);
* a blocking call is issue + wait: now = max(now, end); compute issued between an async call
  and its wait overlaps it for free, as on a GPU's communication stream;
* point-to-point work uses its own stream ("p2p"), so sends and receives do not queue behind
  collectives (NCCL runs them on separate channels); its links are full duplex: sends queue
  behind sends and receives behind receives (lanes "p2p send" / "p2p recv"), but a send and a
  receive overlap, as in a ring step where every rank sends right while it receives from the left.
* storage and host copies (a checkpoint) use the "io" stream: work starts when it is free, and
  a step mark does NOT wait for it (an async checkpoint write outlives steps); ``wait_io`` does.
Times are seconds of EMULATED time; the wall clock never enters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Span:
    """A busy interval of one rank's stream: ``stream`` is "compute", "comm" or "p2p"."""

    rank: int
    stream: str
    name: str
    start: float
    end: float
    bytes: float = 0.0
    flops: float = 0.0

    def as_dict(self) -> dict:
        return dict(
            rank=self.rank,
            stream=self.stream,
            name=self.name,
            start=self.start,
            end=self.end,
            bytes=self.bytes,
            flops=self.flops,
        )


@dataclass
class RankClock:
    """``now`` of one rank and the time its comm / p2p streams are free again."""

    rank: int
    now: float = 0.0
    free: dict = field(default_factory=lambda: {"comm": 0.0, "p2p": 0.0})
    spans: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    pending: list = field(default_factory=list)  # ends of async work not waited on yet
    unresolved: list = field(default_factory=list)  # collectives whose start is not known yet

    def compute(self, seconds: float, name: str = "compute", flops: float = 0.0) -> None:
        """Charge ``seconds`` of compute; back-to-back compute of one name is one span."""
        if seconds <= 0:
            return
        last = self.spans[-1] if self.spans else None
        if (
            last is not None
            and last.stream == "compute"
            and last.name == name
            and last.end == self.now
        ):
            last.end += seconds
            last.flops += flops
        else:
            self.spans.append(
                Span(self.rank, "compute", name, self.now, self.now + seconds, flops=flops)
            )
        self.now += seconds

    def ready(self, stream: str = "comm", lane: str | None = None) -> float:
        """When this rank could start new work on ``stream`` (on one ``lane`` of it, e.g. the
        send direction of "p2p", when given)."""
        if stream == "comm":
            self.resolve()
        return max(self.now, self.free.get(lane or stream, 0.0))

    def defer(
        self, start: Callable[[], float], cost: float, name: str, nbytes: float = 0.0
    ) -> Callable[[], float]:
        """A collective whose start (the participants' latest ready time) is known later:
        ``start()`` may block until every participant has issued it. Collectives resolve in
        issue order, the first time their end is needed (a wait, the next collective, a
        join), so a rank never blocks at issue (an async collective followed by a send to a
        rank that issues it later cannot deadlock). Returns a function giving its end."""
        entry: list = [start, cost, name, nbytes, None]
        self.unresolved.append(entry)

        def end() -> float:
            while entry[4] is None:
                self._resolve_first()
            return entry[4]

        return end

    def _resolve_first(self) -> None:
        e = self.unresolved.pop(0)
        e[4] = self.occupy("comm", max(e[0](), self.free["comm"]), e[1], e[2], e[3])

    def resolve(self) -> None:
        """Fix the start and end of every collective issued so far."""
        while self.unresolved:
            self._resolve_first()

    def occupy(
        self,
        stream: str,
        start: float,
        cost: float,
        name: str,
        nbytes: float = 0.0,
        lane: str | None = None,
    ) -> float:
        """Put work on ``stream`` (and its ``lane``, when given) from ``start`` for ``cost``
        seconds; return its end."""
        end = start + cost
        for key in {stream, lane or stream}:
            self.free[key] = max(self.free.get(key, 0.0), end)
        self.spans.append(Span(self.rank, stream, name, start, end, bytes=nbytes))
        self.pending.append(end)
        return end

    def wait(self, end: float) -> None:
        """The rank waits for work that ends at ``end``."""
        self.now = max(self.now, end)

    def join(self) -> None:
        """Wait for everything issued so far (end of a backward pass, a step, the run)."""
        self.resolve()
        for end in self.pending:
            self.wait(end)
        self.pending.clear()

    def io(self, seconds: float, name: str, nbytes: float = 0.0, wait: bool = True) -> float:
        """``seconds`` of storage / host-copy work on the "io" stream, from when it is free;
        the rank waits for it if ``wait``. Returns its end."""
        start = max(self.now, self.free.get("io", 0.0))
        self.free["io"] = end = start + max(0.0, seconds)
        self.spans.append(Span(self.rank, "io", name, start, end, bytes=nbytes))
        if wait:
            self.wait(end)
        return end

    def wait_io(self) -> None:
        """Wait for every io work issued so far."""
        self.wait(self.free.get("io", 0.0))

    def mark_step(self) -> float:
        """End of a training step: join the streams, record and return the time."""
        self.join()
        self.steps.append(self.now)
        return self.now

    def step_times(self) -> list[float]:
        """Durations between consecutive step marks (the first from time 0)."""
        marks = [0.0] + self.steps
        return [b - a for a, b in zip(marks, marks[1:])]
