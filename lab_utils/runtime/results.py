"""What a run gives back: each rank's return value, or one exception that names the cause (lab 00).
The engine's forensics (``engine/forensics.py``) write the exceptions' messages."""

from __future__ import annotations


class RunResults(list):
    """Per-rank return values, indexed by rank, plus facts about the run."""

    elapsed_s: float
    backend: str
    world_size: int
    oversubscribed: bool
    clean_exit: bool  # every rank finished barrier + clean-up (and, cold, left on its own)
    cleaned: int  # how many ranks did
    pooled: bool  # ran on warm ranks of a pool (False: a fresh torchrun launch)
    log: list[str]


class RankFailure(RuntimeError):
    """One or more ranks raised. ``tracebacks`` maps rank -> the original traceback."""

    def __init__(
        self, message: str, tracebacks: dict[int, str], log: list[str], dead: list[int] = ()
    ):
        super().__init__(message)
        self.tracebacks = tracebacks
        self.log = log
        self.dead = list(dead)  # ranks that died without a word (os._exit, segfault, OOM kill)
        self.elapsed_s = 0.0  # set by the launcher: from the start of the ranks' work to it

    @property
    def ranks(self) -> list[int]:
        return sorted(self.tracebacks)


class RankTimeout(RankFailure):
    """Some ranks did not finish in time (typically stuck in a collective)."""

    def __init__(
        self, message: str, tracebacks: dict[int, str], log: list[str], unfinished: list[int]
    ):
        super().__init__(message, tracebacks, log)
        self.unfinished = unfinished
