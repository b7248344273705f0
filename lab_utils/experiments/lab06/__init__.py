"""Lab 06's experiments (tensor parallelism): what the notebook and tests launch.

    tp.py       the TP layers and a whole TinyGPT against one process, one step's bytes (ledger
                and wire), saved activations with and without SP, the vocabulary-parallel loss
    drills.py   DTensor TP beside ours, the dropout-seeding drill, thin
                matmuls at large t
    twin.py     TP inside one node vs across two, on an emulated GPU cluster (lab_utils.twin)
    tables.py   the results as the notebook's table rows (``from ... lab06 import tables``)

The names of tp.py are importable from here (``lab06.check_blocks``); drills.py is a module of
its own (``from lab_utils.experiments.lab06 import drills``). ``experiments/unshard.py`` gathers
a TP model back to full size.
"""

from lab_utils.experiments.lab06.tp import (
    OPS,
    PHASES,
    ActivationBytes,
    BlockCheck,
    SplitDemo,
    StepComm,
    VocabRun,
    activation_bytes,
    activation_extras,
    check_blocks,
    comm_formula,
    comm_rows,
    maxdiff,
    sp_extras,
    sp_sync_bytes,
    split_demo,
    step_comm,
    tp_group,
    vocab_parallel,
)

__all__ = [
    "OPS",
    "PHASES",
    "tp_group",
    "maxdiff",
    "SplitDemo",
    "split_demo",
    "BlockCheck",
    "check_blocks",
    "StepComm",
    "step_comm",
    "comm_formula",
    "sp_extras",
    "sp_sync_bytes",
    "comm_rows",
    "ActivationBytes",
    "activation_extras",
    "activation_bytes",
    "VocabRun",
    "vocab_parallel",
]
