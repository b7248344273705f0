"""Lab 04's experiments (data parallelism): what the notebook and tests launch.

    ddp.py       sections 1-4: the step every experiment runs (train_step, make_ddp), the hang of
                 uneven shards, exactness, bytes per step, a step's timeline, step times
    details.py   sections 5-8: buffers, SyncBatchNorm, no_sync accumulation, DistributedSampler,
                 torch DDP's communication hooks, asynchronous SGD
    local_sgd.py section 8b: synchronise less often, local SGD and DiLoCo against every-step
                 all-reduce (held-out loss, bytes sent)
    twin.py      section 4d: the bucket-size sweep on an emulated GPU cluster (lab_utils.twin)
    tables.py    the results as the notebook's table rows and figures (``lab04 import tables``)

The names of ddp.py are importable from here (``lab04.train_step``); details.py and local_sgd.py
are modules of their own (``from lab_utils.experiments.lab04 import details, local_sgd``).
Shared rank helpers (this rank's batches, the mean over ranks, SGD written out):
``lab_utils/experiments/common.py``.
"""

from lab_utils.experiments.lab04.ddp import (
    IMPLS,
    LR,
    DDPRun,
    SweepPoint,
    bytes_per_step,
    exactness,
    make_ddp,
    overlap_fraction,
    step_timeline,
    step_times,
    sync_gradients,
    train_step,
    uneven_epoch,
)

__all__ = [
    "IMPLS",
    "LR",
    "DDPRun",
    "SweepPoint",
    "bytes_per_step",
    "exactness",
    "make_ddp",
    "overlap_fraction",
    "step_timeline",
    "step_times",
    "sync_gradients",
    "train_step",
    "uneven_epoch",
]
