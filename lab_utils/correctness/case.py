"""One configuration to check: its step on ranks, the same step in one process (lab 14).

A Case is two functions over the same model, initial weights and data:

    step(env, rec)       one training step on a rank, under the configuration's layout;
                         records with ``rec`` (recorder.py) every tensor it wants compared,
                         each with the Layout that says how the ranks' pieces reassemble
    reference(rec)       the same step in ONE process, on the GLOBAL batch, in float64,
                         recording the same names (no layouts: it holds whole tensors)

Both start from ``torch.manual_seed(seed)``. ``reduction_size`` is the n of the error bound
(compare.py). ``expect`` lists collective counts the configuration promises, as
(op, the group's global ranks, calls per rank), e.g. ("reduce_scatter", (0, 1, 2, 3), 2) for a
ZeRO-2 with two units: a count that differs is reported even when every number is right.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch.distributed as dist

from lab_utils.correctness.recorder import Recorder

Expect = tuple[str, tuple[int, ...], int]  # (op, group ranks, calls per rank)


@dataclass
class RankEnv:
    """What a Case's step gets on a rank: the run's Ctx and a cache of process groups."""

    ctx: Any  # lab_utils.Ctx
    groups: dict[tuple, Any] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return self.ctx.rank

    def group(self, partition: tuple[tuple[int, ...], ...] | list[list[int]]) -> Any:
        """This rank's group of ``partition`` (every rank calls it with the same partition:
        gloo builds each group on all ranks, in the same order). Cached for the launch."""
        key = tuple(tuple(p) for p in partition)
        if key not in self.groups:
            self.groups[key] = [dist.new_group(list(p)) for p in key]
        mine = [g for p, g in zip(key, self.groups[key]) if self.rank in p]
        if not mine:
            raise ValueError(f"rank {self.rank} is in no group of the partition {key}")
        return mine[0]


@dataclass(frozen=True)
class Case:
    name: str
    world_size: int
    step: Callable[[RankEnv, Recorder], None]
    reference: Callable[[Recorder], None]
    reduction_size: int = 256
    expect: tuple[Expect, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"Case {self.name!r}: world_size must be >= 1, got {self.world_size}")
        if self.reduction_size < 1:
            raise ValueError(
                f"Case {self.name!r}: reduction_size must be >= 1, got {self.reduction_size}"
            )
