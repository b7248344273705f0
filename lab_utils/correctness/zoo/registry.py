"""Every bug of the zoo, with its source and the op the bisector must name (lab 14)."""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.correctness.case import Case
from lab_utils.correctness.zoo import context, experts, loss, pipeline, reduction, tensor_parallel


@dataclass(frozen=True)
class Bug:
    name: str
    source: str  # where it was reported, publicly (repository#issue or PR)
    expected_op: str  # what the bisector must name for the buggy version
    buggy: Case
    fixed: Case


MODULES = (reduction, loss, experts, tensor_parallel, pipeline, context)
BUGS: tuple[Bug, ...] = tuple(Bug(*row) for module in MODULES for row in module.cases())
