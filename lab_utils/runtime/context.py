"""Set-up and tear-down of one rank, in one place (lab 00).

Every experiment in the course runs inside ``distributed()``: it picks the backend and
device, initialises the default process group with a SHORT timeout (the default is 30
minutes, far too long for a lab), hands the rank a small ``Ctx``, and tears down in the
order that keeps gloo from aborting at exit.

It works the same under the course launcher (``lab_utils.run``) and under a plain
``torchrun`` on a cluster: everything it needs comes from torchrun's environment
variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Ctx:
    """What a worker function receives as its first argument.

    rank:             this process's index in [0, world_size)
    world_size:       number of processes in the job
    local_rank:       index among the processes on this node (picks the GPU)
    local_world_size: number of processes on this node
    backend:          "gloo" (CPU tensors) or "nccl" (CUDA tensors, one GPU per rank)
    device:           where this rank's tensors should live
    group:            the default process group (every rank); pass it, or a subgroup,
                      explicitly to collectives
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str
    device: torch.device
    group: Any

    def print0(self, *args: Any, **kwargs: Any) -> None:
        """print() on rank 0 only: one copy of a message every rank would repeat."""
        if self.rank == 0:
            print(*args, **kwargs, flush=True)

    def barrier(self) -> None:
        dist.barrier(group=self.group)


def resolve_backend(backend: str, local_world_size: int) -> str:
    """'auto' -> NCCL when this node has a GPU for every local rank, else gloo on CPU."""
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', not {backend!r}")
    if backend == "gloo":
        return backend
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "nccl":
        if gpus < local_world_size:
            raise ValueError(
                f"backend 'nccl' needs one GPU per rank on a node: {local_world_size} ranks, "
                f"{gpus} GPU(s) here (NCCL refuses two ranks on one GPU). "
                "Use backend='auto' (gloo on CPU when GPUs are short) or fewer ranks."
            )
        return backend
    return "nccl" if gpus >= local_world_size and dist.is_nccl_available() else "gloo"


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise RuntimeError(
                f"environment variable {name} is not set: this code must run under torchrun "
                "or lab_utils.run(...), which set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT"
            )
        return default
    return int(value)


@contextlib.contextmanager
def distributed(backend: str = "auto", timeout_s: float = 60.0) -> Iterator[Ctx]:
    """Initialise the default process group, yield a Ctx, tear down cleanly.

    On success the exit path is: barrier (every rank has finished its collectives),
    gc.collect() (drop tensors/work handles that still reference the group), then
    destroy_process_group(). Without the barrier and collect, a gloo rank can abort at
    exit with "terminate called without an active exception". On an exception no
    barrier is attempted (the other ranks may never reach it).
    """
    world_size = _env_int("WORLD_SIZE")
    rank = _env_int("RANK")
    local_rank = _env_int("LOCAL_RANK", 0)
    local_world_size = _env_int("LOCAL_WORLD_SIZE", world_size)
    backend = resolve_backend(backend, local_world_size)
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(
        backend=backend,
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
        device_id=device if backend == "nccl" else None,
    )
    ctx = Ctx(rank, world_size, local_rank, local_world_size, backend, device, dist.group.WORLD)
    try:
        yield ctx
    except BaseException:
        dist.destroy_process_group()
        raise
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()
