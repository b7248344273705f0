"""The bug zoo: real silent bugs of distributed training, re-created small on gloo (lab 14).

Each Bug has a buggy and a fixed Case (correctness/case.py), the public source where the bug
was reported, and the op the bisector must name. ``python -m lab_utils zoo`` bisects all of
them in one 4-rank launch and prints one row per bug; it exits 0 only if every bug is found at
its op and every fixed version is clean.

    model.py       TinyLM, its data, the data-parallel layouts every bug reuses
    reduction.py   SUM vs AVG, a ZeRO-2 that all-reduces
    loss.py        per-rank token means, accumulation undivided
    experts.py     the MoE balance loss per rank, on real expert parallelism
    tensor_parallel.py  TP groups from the wrong grid, dropout streams, clipping by a local norm
    pipeline.py    a stage that skips the DP sync, tied embeddings across stages
    context.py     ring attention across packed documents
    registry.py    Bug (name, source, expected op, buggy, fixed) and BUGS
    table.py       run_zoo: bisect every case, the table, the verdicts
"""

from lab_utils.correctness.zoo.registry import BUGS, Bug
from lab_utils.correctness.zoo.table import ZooRow, main, run_zoo

__all__ = ["BUGS", "Bug", "ZooRow", "run_zoo", "main"]
