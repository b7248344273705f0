"""Lab 07's experiments (pipeline parallelism): what the notebook, tests and benchmark run.

pipeline.py         the from-scratch schedules on real ranks: gradients, bubble, memory, bytes
sim.py              the observer that times the StageWorkers from outside (emulated clock under
                    lab_utils.twin)
torch_pipeline.py   torch.distributed.pipelining's schedules, their order recorded inside the
                    stages, their time on the emulated clock; replay;
                    TORCH_CONFIG (the model those runs use)
tables.py           each schedule's formula beside its measurement, as table rows
figures.py          the bubble sweep and the peak activations per stage, as plotly figures
"""

from lab_utils.experiments.lab07.pipeline import (
    PP_CONFIG,
    PipelineRun,
    StageRun,
    grad_error,
    make_batch,
    merge,
    p2p_bytes_formula,
    pipeline_step,
    pp_worker,
    reference_grads,
    run_pipeline,
    stage_compute_costs,
)
from lab_utils.experiments.lab07.sim import StageObserver

__all__ = [
    "PP_CONFIG",
    "PipelineRun",
    "StageRun",
    "grad_error",
    "make_batch",
    "merge",
    "p2p_bytes_formula",
    "pipeline_step",
    "pp_worker",
    "reference_grads",
    "run_pipeline",
    "stage_compute_costs",
    "StageObserver",
]
