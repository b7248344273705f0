"""What every run starts from, on warm (pooled) ranks and fresh ones alike (lab 00).

A run starts with:
  * torch's default generator, Python's ``random`` and NumPy's global generator seeded with
    ``RUN_SEED`` (the same on every rank: add ``ctx.rank`` to a seed for per-rank randomness);
  * gradients enabled, float32 as the default dtype, no anomaly detection, no deterministic mode;
  * no global module hooks, no TorchDispatchMode / TorchFunctionMode left active;
  * the default process group, with this run's timeout.

After a pooled run, ``restore`` puts back what a run may change in passing (grad mode, default
dtype, global hooks, flags) and destroys the process groups the run created. What cannot be put
back (the default group destroyed, a dispatch mode still on the stack) makes the ranks DIRTY:
the pool then restarts before the next run, so no run ever inherits it. A function defined in
a notebook travels by value and gets fresh globals on every run; an importable module's globals
live as long as the process, as in any Python program.
"""

from __future__ import annotations

import datetime
import random
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.modules.module as module_hooks

RUN_SEED = 0
_HOOK_DICTS = [
    n
    for n in dir(module_hooks)
    if n.startswith("_global_") and isinstance(getattr(module_hooks, n), dict)
]


def seed_everything(seed: int = RUN_SEED) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass


def set_timeout(seconds: float) -> None:
    """The default group's timeout for collectives from now on (gloo p2p keeps its own)."""
    if dist.is_initialized():
        dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=seconds))


def start_run(threads: int, pg_timeout_s: float, fresh: bool = True) -> "Snapshot":
    """Set this run's threads and timeout and, if ``fresh``, the documented random state;
    return what restore() compares against."""
    torch.set_num_threads(threads)
    set_timeout(pg_timeout_s)
    if fresh:
        seed_everything()
    return Snapshot.take()


@dataclass
class Snapshot:
    grad: bool
    dtype: torch.dtype
    anomaly: bool
    deterministic: bool
    hooks: dict[str, dict]
    groups: set

    @classmethod
    def take(cls) -> "Snapshot":
        return cls(
            torch.is_grad_enabled(),
            torch.get_default_dtype(),
            torch.is_anomaly_enabled(),
            torch.are_deterministic_algorithms_enabled(),
            {n: dict(getattr(module_hooks, n)) for n in _HOOK_DICTS},
            set(dist.distributed_c10d._world.pg_map) if dist.is_initialized() else set(),
        )


def restore(before: Snapshot) -> str:
    """Undo a run's side effects; return why the ranks are dirty ("" when they are clean).

    Call after a barrier: every rank has finished the run's collectives, so destroying the
    groups it created cannot cut off a peer.
    """
    if not dist.is_initialized():
        return "the run destroyed the default process group"
    dirty = []
    if torch._C._len_torch_dispatch_stack():
        dirty.append("a TorchDispatchMode is still active")
    if torch._C._len_torch_function_stack():
        dirty.append("a TorchFunctionMode is still active")
    torch.set_grad_enabled(before.grad)
    torch.set_default_dtype(before.dtype)
    if torch.is_anomaly_enabled() != before.anomaly:
        torch.set_anomaly_enabled(before.anomaly)
    if torch.are_deterministic_algorithms_enabled() != before.deterministic:  # 1.4 s on first call
        torch.use_deterministic_algorithms(before.deterministic)
    for name, saved in before.hooks.items():
        hooks = getattr(module_hooks, name)
        hooks.clear()
        hooks.update(saved)
    for group in set(dist.distributed_c10d._world.pg_map) - before.groups:
        dist.destroy_process_group(group)  # sockets and threads of sub-groups the run made
    return "; ".join(dirty)
