"""Lab 13's experiments (performance engineering): what the notebook and tests launch.

    traces.py    sections 1-2: a data-parallel step profiled on every rank (ours and torch's),
                 with our own spans of the same step for comparison
"""
from lab_utils.experiments.lab13.traces import IMPLS, TracedRun, ddp_traces

__all__ = ["IMPLS", "TracedRun", "ddp_traces"]
