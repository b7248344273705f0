"""Lab 10's experiments (scaling): what the notebook and tests launch.

    scaling.py   strong and weak scaling on ranks (real compute and simulated devices), the
                 bottleneck families, the fit; StepLog (the fit_serial_fraction exercise's input)
    local.py     in one process, one core: matmul rates by size, a slow data loader and prefetching
    twin.py      strong and weak scaling on two clocks: this machine's and an emulated cluster's

The names of both are importable from here (``lab10.scaling_worker``, ``lab10.matmul_rates``).
"""
from lab_utils.experiments.lab10.local import (SCALING_CONFIG, LoaderStats, MatmulRate,
                                               SlowDataset, background_prefetch, loader_experiment,
                                               matmul_rates, one_thread)
from lab_utils.experiments.lab10.scaling import (Bottlenecks, CommSplit, CommStats, CurveFit,
                                                 RunStats, ScalingResults, StepLog,
                                                 bottleneck_worker, comm_split, fit_curves,
                                                 scaling_worker)

__all__ = ["SCALING_CONFIG", "LoaderStats", "MatmulRate", "SlowDataset", "background_prefetch",
           "loader_experiment", "matmul_rates", "one_thread", "StepLog", "RunStats",
           "ScalingResults", "scaling_worker", "CurveFit", "fit_curves", "CommStats", "CommSplit",
           "comm_split", "Bottlenecks", "bottleneck_worker"]
