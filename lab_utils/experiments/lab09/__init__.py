"""Lab 09's experiments (mixture of experts, expert parallelism): what the notebook and tests run.

    shape.py     the toy MoE's shape (MoEShape) and the synthetic tokens, target and probe every
                 rank can make for every rank
    ep.py        EP against the single-process MoELayer (forward, gradients, all-to-all bytes),
                 and EP x DP on a DeviceMesh
    balance.py   the router trained with and without the load-balancing loss; capacity and drops
    views.py     the notebook's table rows and figures (routing, EP checks, bytes, balance,
                 capacity, DeepSeek-V3's memory, traffic and layouts)

The names of shape.py and ep.py are importable from here (``lab09.ep_checks``); balance.py and
views.py are their own modules (``from lab_utils.experiments.lab09 import balance``).
"""

from lab_utils.experiments.lab09.ep import (
    EPCheck,
    EPChecks,
    EPRun,
    MeshResult,
    ep_checks,
    ep_dp_mesh,
    ep_experiments,
)
from lab_utils.experiments.lab09.shape import MoEShape, probe_for, teacher, tokens_for

__all__ = [
    "EPCheck",
    "EPChecks",
    "EPRun",
    "MeshResult",
    "ep_checks",
    "ep_dp_mesh",
    "ep_experiments",
    "MoEShape",
    "probe_for",
    "teacher",
    "tokens_for",
]
