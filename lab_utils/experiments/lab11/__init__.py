"""Lab 11's experiments (production): checkpoints, restarts, faults, jobs under plain torchrun.

    training.py  FSDP2 training with a DCP checkpoint every k steps, an injected crash, the exact
                 resume (train_run, train_loop; train_state / restore: what a checkpoint holds;
                 checkpoint_size_row: its size)
    drill.py     the checkpoint drill in one launch: incomplete resumes, sharded vs rank-0 saves,
                 resharding to another world size
    elastic.py   jobs under plain torchrun: an elastic restart and its log, torchrun_job, a hung
                 job's stacks, the stall of dcp.save vs dcp.async_save
    faults.py    jobs that break without crashing: NaNs, silent divergence, stragglers, a hang
                 (flight recorder, watchdog)
    twin.py      on the emulated cluster (lab_utils.twin): a checkpoint's stall, sync vs async,
                 and a straggler GPU

The names of training.py and drill.py are importable from here (``lab11.checkpoint_drill``);
elastic.py, faults.py and twin.py are modules of their own (``from lab_utils.experiments.lab11
import elastic, faults, twin``). The goodput formulas are calculators:
``lab_utils/calc/goodput.py``.
"""

from lab_utils.experiments.lab11.drill import (
    CheckpointDrill,
    Resharded,
    SaveComparison,
    checkpoint_drill,
    compare_saves,
    reshard_load,
)
from lab_utils.experiments.lab11.training import (
    RunConfig,
    ShuffledLoader,
    TrainLog,
    build,
    checkpoint_size_row,
    eval_loss,
    full_fingerprint,
    latest_checkpoint,
    restore,
    run_data,
    train_loop,
    train_run,
    train_state,
)

__all__ = [
    "checkpoint_size_row",
    "CheckpointDrill",
    "Resharded",
    "SaveComparison",
    "checkpoint_drill",
    "compare_saves",
    "reshard_load",
    "RunConfig",
    "ShuffledLoader",
    "TrainLog",
    "build",
    "eval_loss",
    "full_fingerprint",
    "latest_checkpoint",
    "restore",
    "run_data",
    "train_loop",
    "train_run",
    "train_state",
]
