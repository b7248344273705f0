"""Lab 10's experiments (scaling): what the notebook and tests launch.

    scaling.py   the records of a scaling run (RunStats, ScalingResults, CurveFit), the
                 bottleneck families; StepLog (the fit_serial_fraction exercise's input)
    local.py     in one process, one core: matmul rates by size, a slow data loader and prefetching
    twin.py      strong and weak scaling on two clocks: this machine's and an emulated cluster's

The names of scaling.py and local.py are importable from here (``lab10.bottleneck_worker``,
``lab10.matmul_rates``); twin.py is a module of its own.
"""

from lab_utils.experiments.lab10.local import (
    SCALING_CONFIG,
    LoaderStats,
    MatmulRate,
    SlowDataset,
    background_prefetch,
    loader_experiment,
    matmul_rates,
    one_thread,
)
from lab_utils.experiments.lab10.scaling import (
    Bottlenecks,
    CommSplit,
    CommStats,
    CurveFit,
    RunStats,
    ScalingResults,
    StepLog,
    bottleneck_row,
    bottleneck_worker,
    comm_split,
)

__all__ = [
    "SCALING_CONFIG",
    "LoaderStats",
    "MatmulRate",
    "SlowDataset",
    "background_prefetch",
    "loader_experiment",
    "matmul_rates",
    "one_thread",
    "StepLog",
    "RunStats",
    "ScalingResults",
    "CurveFit",
    "CommStats",
    "CommSplit",
    "comm_split",
    "Bottlenecks",
    "bottleneck_worker",
    "bottleneck_row",
]
