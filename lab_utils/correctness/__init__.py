"""Is a distributed run correct? The differential bisector and the bug zoo (lab 14).

bisector.py   bisect(case): the ONE public function: the first op (forward, then
              backward) whose output or gradient leaves the float64 reference
case.py       Case: a configuration's step on ranks + its single-process reference
recorder.py   Recorder: forward outputs, the loss, gradients, named values, in order
layout.py     Layout (mesh + Replicate / Shard / Partial / FlatShard) and reassemble
compare.py    the error bound from the dtype and the reduction size; the diagnosis
matrix.py     the layout-equivalence matrix: every legal layout within 8 ranks vs one
              process, bitwise / within the bound / wrong (lab 14)
zoo/          11 real silent bugs, buggy and fixed (`python -m lab_utils zoo`)

from lab_utils.correctness import bisect
from lab_utils.correctness.zoo import BUGS
print(bisect(BUGS[0].buggy))   # names the op, the ranks, the error and the kind of wrong
"""

from lab_utils.correctness.bisector import BisectReport, bisect
from lab_utils.correctness.case import Case, RankEnv
from lab_utils.correctness.compare import Divergence, error_bound
from lab_utils.correctness.layout import (
    FlatShard,
    Layout,
    LayoutError,
    Partial,
    Replicate,
    Shard,
    reassemble,
    replicated,
)
from lab_utils.correctness.recorder import Recorder

__all__ = [
    "bisect",
    "BisectReport",
    "Case",
    "RankEnv",
    "Recorder",
    "Divergence",
    "error_bound",
    "Layout",
    "LayoutError",
    "Replicate",
    "Shard",
    "Partial",
    "FlatShard",
    "reassemble",
    "replicated",
]
