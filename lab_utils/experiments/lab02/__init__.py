"""Lab 02's experiments (one process, CPU): precision, FP8, memory and batch size.

    precision.py  formats and their ranges, 16-bit training with loss scaling, a forward overflow,
                  the AMP step, what autocast runs in which dtype
    fp8.py        FP8, EMULATED: casts, per-tensor (delayed) scaling, an FP8-rounded matmul
    memory.py     activation checkpointing (full, in segments, selective), large-batch SGD
    views.py      the lab's figures and table rows (plumbing the notebook does not show)

The names of precision.py are importable from here (``lab02.train``); fp8.py and memory.py are
modules of their own (``from lab_utils.experiments.lab02 import fp8, memory``), and so is
views.py.
"""

from lab_utils.experiments.lab02.precision import (
    OP_GROUPS,
    TORCH_DTYPES,
    amp_step,
    attention_logits,
    autocast_table,
    bits_lost,
    format_rows,
    forward_dtypes,
    half_gap,
    layout_figure,
    make_data,
    train,
)

__all__ = [
    "TORCH_DTYPES",
    "format_rows",
    "layout_figure",
    "make_data",
    "train",
    "attention_logits",
    "amp_step",
    "OP_GROUPS",
    "forward_dtypes",
    "autocast_table",
    "bits_lost",
    "half_gap",
]
