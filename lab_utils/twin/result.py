"""What an emulated run returns: each rank's result, spans, step marks and what was not charged.

Times here are EMULATED seconds (the virtual clock of ``clock.py``), never wall time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab_utils.twin.scale import Scale
from lab_utils.twin.topology import Cluster


@dataclass
class RankRecord:
    """One rank's emulated run (plain values: it travels back from the rank)."""

    rank: int
    result: Any
    spans: list
    steps: list
    end: float
    unknown: list
    calls: dict


@dataclass
class Emulation:
    """Per-rank results and emulated timelines of one run on ``cluster``."""

    cluster: Cluster
    scale: Scale
    records: list

    @property
    def results(self) -> list:
        """What each rank's function returned, by rank."""
        return [r.result for r in self.records]

    @property
    def spans(self) -> list[dict]:
        """Every busy interval of every rank: rank, stream, name, start, end, bytes, flops."""
        return [s for r in self.records for s in r.spans]

    @property
    def unknown(self) -> list[str]:
        """Calls that ran for real but were charged no emulated time."""
        return sorted({u for r in self.records for u in r.unknown})

    @property
    def makespan(self) -> float:
        """Emulated seconds until the last rank finished."""
        return max(r.end for r in self.records)

    def step_times(self, rank: int | None = None) -> list[float]:
        """Emulated duration of each marked step (``twin.step()``), slowest rank by default."""

        def per(rec: RankRecord) -> list[float]:
            marks = [0.0] + list(rec.steps)
            return [b - a for a, b in zip(marks, marks[1:])]

        if rank is not None:
            return per(self.records[rank])
        rows = [per(r) for r in self.records]
        return [max(col) for col in zip(*rows)]

    def busy(self, rank: int, stream: str) -> float:
        """Seconds ``rank``'s ``stream`` ("compute", "comm", "p2p") was busy (union)."""
        iv = sorted(
            (s["start"], s["end"]) for s in self.records[rank].spans if s["stream"] == stream
        )
        total, cur_s, cur_e = 0.0, None, None
        for a, b in iv:
            if cur_e is None or a > cur_e:
                total += 0.0 if cur_e is None else cur_e - cur_s
                cur_s, cur_e = a, b
            else:
                cur_e = max(cur_e, b)
        return total + (0.0 if cur_e is None else cur_e - cur_s)

    def overlap(self, rank: int) -> float:
        """Seconds of ``rank``'s communication hidden under its compute."""
        comp = [
            (s["start"], s["end"]) for s in self.records[rank].spans if s["stream"] == "compute"
        ]
        comm = [(s["start"], s["end"]) for s in self.records[rank].spans if s["stream"] == "comm"]
        return sum(max(0.0, min(b, d) - max(a, c)) for a, b in comm for c, d in comp)
