"""Lab 05's experiments (ZeRO and FSDP): what the notebook, tests and exercises launch.

    sharding.py   DDP, ZeRO-1/2, our FSDP and torch's fully_shard on the same data (losses, memory,
                  collectives); FSDP's mixed precision and its one-process check
    units.py      section 7: one FSDP step unit by unit on the emulated clock (which all-gather
                  overlaps which block's compute, the full weights held over time)
    practice.py   gradient accumulation under each kind of sharding; what the FSDP2 tutorials have
                  you type (meta-device init, clipping sharded gradients, HSDP)
    twin.py       section 7b: prefetch, and ZeRO-3 against ZeRO-2, timed on an emulated GPU
                  cluster (lab_utils.twin), our FSDP beside torch's fully_shard

The names of sharding.py and units.py are importable from here (``lab05.train_variants``,
``lab05.unit_steps``); practice.py is a module of its own (``from lab_utils.experiments.lab05
import practice``), and so is twin.py.
"""

from lab_utils.experiments.lab05.sharding import (
    BF16,
    LR,
    TrainResult,
    apply_fully_shard,
    build,
    mixed_precision_reference,
    mixed_precision_run,
    train_variants,
)
from lab_utils.experiments.lab05.units import (
    UnitStep,
    UnitTimeline,
    gathered_bytes,
    unit_step,
    unit_steps,
    unit_timelines,
)

__all__ = [
    "LR",
    "BF16",
    "TrainResult",
    "build",
    "apply_fully_shard",
    "train_variants",
    "UnitStep",
    "UnitTimeline",
    "gathered_bytes",
    "unit_step",
    "unit_steps",
    "unit_timelines",
    "mixed_precision_reference",
    "mixed_precision_run",
]
