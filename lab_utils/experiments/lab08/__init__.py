"""Lab 08's experiments (3D parallelism): what the notebook and tests run.

    training.py  2D (dp x tp) and 3D (dp x tp x pp) training of TinyGPT against one process; each
                 mesh axis's traffic by ledger and wire; one rank's step traced
    plans.py     the planning side, pure calculation: tables over calc's planner, bytes per axis,
                 the TP <-> PP sweep, the recipe ladder, published layouts, source claims
    ring.py      context parallelism: ring attention against full attention on real ranks
    cp.py        the context-parallel variants side by side (ring, Ulysses, all-gather-KV,
                 zig-zag): outputs, gradients, bytes and saved memory per rank

The names of training.py are importable from here (``lab08.train_3d``); plans.py and ring.py are
modules of their own (``from lab_utils.experiments.lab08 import cp, plans, ring``).
"""

from lab_utils.experiments.lab08.training import (
    AXES,
    CFG,
    LR,
    AxisComm,
    Run2D,
    Run3D,
    TraceStep,
    by_axis,
    experiments_2d,
    reference_grads,
    train_2d,
    train_3d,
)

__all__ = [
    "AXES",
    "CFG",
    "LR",
    "AxisComm",
    "Run2D",
    "Run3D",
    "TraceStep",
    "by_axis",
    "experiments_2d",
    "reference_grads",
    "train_2d",
    "train_3d",
]
