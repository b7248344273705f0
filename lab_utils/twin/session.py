"""The emulation in progress on this rank: its clock, cluster, scale and what it could not charge.

One per process at a time (a rank runs one emulated function at a time). The process-group
backend (``backend.py``) and the compute charge (``compute.py``) read it through ``current()``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Optional

from lab_utils.twin.clock import RankClock
from lab_utils.twin.scale import Scale
from lab_utils.twin.topology import Cluster


@dataclass
class Session:
    """This rank's emulation: ``clock``, ``cluster``, ``scale``; ``unknown`` names the calls
    charged nothing (each reported once); ``calls`` counts the charged calls by name."""

    rank: int
    cluster: Cluster
    scale: Scale
    clock: RankClock = field(init=False)
    unknown: list = field(default_factory=list)
    calls: dict = field(default_factory=dict)
    forwarding: int = 0  # > 0 while the backend forwards to gloo (its ops are not the learner's)

    def __post_init__(self) -> None:
        self.clock = RankClock(self.rank)

    def count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def report_unknown(self, name: str) -> None:
        """A call the emulator cannot charge: charged nothing, reported ONCE per name."""
        if name not in self.unknown:
            self.unknown.append(name)
            if self.rank == 0:
                warnings.warn(
                    f"twin: {name} is not modelled; it ran for real but was charged "
                    "no emulated time",
                    stacklevel=3,
                )


_CURRENT: Optional[Session] = None


def current() -> Optional[Session]:
    """The session of this rank, or None outside an emulated run."""
    return _CURRENT


def begin(session: Session) -> None:
    global _CURRENT
    if _CURRENT is not None:
        raise RuntimeError("an emulated run is already in progress on this rank")
    _CURRENT = session


def end() -> None:
    global _CURRENT
    _CURRENT = None
