"""Lab 03's experiments (collectives): what the notebook and tests launch.

    collectives.py  on this machine: every collective's before/after, the ring's steps, bytes by
                    formula, ledger and wire, who sends to whom, all-reduce times, the bytes of
                    each phase of the hierarchical all-reduce
    twin.py         section 4b: the same timed all-reduces on an emulated GPU cluster
                    (lab_utils.twin): the alpha-beta fit, algbw and busbw, flat vs hierarchical
    views.py        the lab's figures and table rows (plumbing the notebook does not show)

The names of collectives.py are importable from here (``lab03.ring_trace``); twin.py is a module
of its own (``from lab_utils.experiments.lab03 import twin``); views.py is imported here
(``lab03.views``).
"""

from lab_utils.experiments.lab03 import views
from lab_utils.experiments.lab03.collectives import (
    WIRE_NUMEL,
    RingTrace,
    SendMatrix,
    WireSample,
    all_reduce_sweep,
    collective_before_after,
    hierarchical_bytes,
    ring_trace,
    time_all_reduce,
    who_sends_to_whom,
    wire_per_collective,
)

__all__ = [
    "WIRE_NUMEL",
    "RingTrace",
    "SendMatrix",
    "WireSample",
    "all_reduce_sweep",
    "collective_before_after",
    "hierarchical_bytes",
    "ring_trace",
    "time_all_reduce",
    "who_sends_to_whom",
    "wire_per_collective",
    "views",
]
