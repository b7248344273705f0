"""Lab 13's experiments (performance engineering): what the notebook and tests launch.

traces.py    sections 1-2: a data-parallel step profiled on every rank (ours and torch's),
             with our own spans of the same step for comparison; FSDP (ours) and FSDP2 with
             prefetch off / on; one pipeline schedule (lab 07's 1F1B)
mfu.py       section 4: FLOPs by FlopCounterMode, MFU / HFU from the trace's step time, the
             levers (micro-batch, checkpointing, fused AdamW, torch.compile) measured
memory.py    section 3: profile_memory's timeline of a step beside lab 01's ledger
injected.py  section 5: runs with one injected problem each (the diagnosis exercise)
"""

from lab_utils.experiments.lab13.traces import (
    FSDP_VARIANTS,
    IMPLS,
    TracedRun,
    ddp_traces,
    fsdp_traces,
    pipeline_trace,
)

__all__ = ["FSDP_VARIANTS", "IMPLS", "TracedRun", "ddp_traces", "fsdp_traces", "pipeline_trace"]
