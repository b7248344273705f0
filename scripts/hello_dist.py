"""The smallest distributed program: what you write on Monday, launched by torchrun (lab 00).

    torchrun --standalone --nproc-per-node 4 scripts/hello_dist.py          # one machine
    torchrun --nnodes 2 --node-rank K --nproc-per-node 4 \\
             --master-addr HOST0 --master-port 29500 scripts/hello_dist.py  # on node K = 0, 1

torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for each process;
init_process_group reads them (env://). Each rank prints one JSON line (what lab 00 parses).
"""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist


def pg_timeout_s(device: torch.device) -> float | None:
    """The timeout the default group got (we passed none). A private attribute: for the lab only."""
    try:
        return dist.group.WORLD._get_backend(device).options._timeout.total_seconds()
    except (AttributeError, RuntimeError):
        return None


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])  # this process's index on its own node
    # NCCL needs a GPU of its own for every process on a node; with fewer GPUs, gloo on CPU
    use_cuda = torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"])
    if use_cuda:
        torch.cuda.set_device(local_rank)  # before init: NCCL binds this process to that GPU
    dist.init_process_group("nccl" if use_cuda else "gloo")  # blocks until all ranks join
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")

    x = torch.tensor([float(rank + 1)], device=device)  # the work: rank r holds r + 1
    dist.all_reduce(x)  # SUM over every rank of every node
    print(
        json.dumps(
            {
                "RANK": rank,
                "LOCAL_RANK": local_rank,
                "WORLD_SIZE": world,
                "node": int(os.environ["GROUP_RANK"]),
                "pid": os.getpid(),
                "sum": x.item(),
                "backend": dist.get_backend(),
                "pg_timeout_s": pg_timeout_s(device),
            }
        )
        + "\n",
        end="",
        flush=True,
    )  # one write, so under PYTHONUNBUFFERED another rank cannot split the line
    dist.destroy_process_group()  # tear the communicators down before exiting


if __name__ == "__main__":
    main()
