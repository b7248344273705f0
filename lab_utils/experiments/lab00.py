"""Small worker functions used by lab 00, the doctor and the CLI examples (lab 00).

They live in the library, not in a notebook, so that `python -m lab_utils run
lab_utils.experiments.lab00:hello --nproc 4` and a cluster's torchrun can import them.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from lab_utils.runtime.context import Ctx

LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def hello(ctx: Ctx) -> dict:
    """Each rank reports who it is and the environment torchrun gave it."""
    print(f"hello from rank {ctx.rank} of {ctx.world_size} on {ctx.device} ({ctx.backend})")
    return {
        "rank": ctx.rank,
        "device": str(ctx.device),
        "backend": ctx.backend,
        "pid": os.getpid(),
        **{k: os.environ.get(k) for k in LAUNCH_ENV},
    }


def allreduce_demo(ctx: Ctx, size: int = 4) -> dict:
    """Rank r contributes [r, r+1, ...]; after all_reduce(SUM) every rank holds the sum.

    Communication (ring): each rank sends 2(N-1)/N x size x 4 bytes.
    """
    before = torch.arange(size, dtype=torch.float32, device=ctx.device) + ctx.rank
    after = before.clone()
    dist.all_reduce(after, op=dist.ReduceOp.SUM, group=ctx.group)
    print(f"before {before.tolist()} -> after {after.tolist()}")
    return {"before": before.cpu().tolist(), "after": after.cpu().tolist()}


def allreduce_timing(ctx: Ctx, numel: int = 1 << 20, repeats: int = 5) -> float:
    """Median seconds of one all_reduce of `numel` float32 (the doctor's smoke test)."""
    t = torch.ones(numel, device=ctx.device)
    dist.all_reduce(t, group=ctx.group)  # warm-up: connections, buffers
    times = []
    for _ in range(repeats):
        dist.barrier(group=ctx.group)
        start = time.perf_counter()
        dist.all_reduce(t, group=ctx.group)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


# --- the plain torchrun script (scripts/hello_dist.py), launched as a real multi-node job ---

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@dataclass
class TorchrunJob:
    """What a plain torchrun launch printed: one row per rank (sorted by RANK), and the commands."""

    commands: list[str]
    rows: list[dict]
    returncodes: list[int]
    output: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_commands(script: Path, nnodes: int, nproc_per_node: int, port: int) -> list[list[str]]:
    """One torchrun command per node, as you would type them on nnodes machines (here:
    localhost)."""
    return [
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(nnodes),
            "--node-rank",
            str(k),
            "--nproc-per-node",
            str(nproc_per_node),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(port),
            str(script),
        ]
        for k in range(nnodes)
    ]


def node_gpus(nnodes: int, nproc_per_node: int) -> list[str]:
    """CUDA_VISIBLE_DEVICES for each simulated node. Real nodes have GPUs of their own; nodes
    simulated on ONE machine share its GPUs, and a script that picks ``cuda:LOCAL_RANK`` would put
    a rank of every node on GPU 0 (NCCL: "Duplicate GPU detected", seen on a 1-GPU machine with 2
    nodes of 1 rank). So each node gets its own GPUs when there are enough for every rank, and
    none otherwise (every rank then uses gloo on the CPU, as the scripts decide)."""
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = (
        [d for d in visible.split(",") if d.strip()]
        if visible is not None
        else [str(i) for i in range(torch.cuda.device_count())]
    )
    if len(ids) < nnodes * nproc_per_node:
        return [""] * nnodes
    return [",".join(ids[k * nproc_per_node : (k + 1) * nproc_per_node]) for k in range(nnodes)]


def run_torchrun(
    script: Path, nnodes: int = 2, nproc_per_node: int = 2, timeout_s: float = 120.0
) -> TorchrunJob:
    """Start `nnodes` torchrun agents on this machine, as if on `nnodes` machines; parse the JSON
    line each rank prints. On timeout every agent and its ranks are killed (their own session)."""
    cmds = torchrun_commands(script, nnodes, nproc_per_node, _free_port())
    env = dict(os.environ, OMP_NUM_THREADS="1")  # what torchrun sets anyway, without its warning
    gpus = node_gpus(nnodes, nproc_per_node)
    procs = [
        subprocess.Popen(
            c,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(env, CUDA_VISIBLE_DEVICES=gpus[k]),
            start_new_session=True,
        )
        for k, c in enumerate(cmds)
    ]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout_s)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    text = "".join(outputs)
    # raw_decode: another process's output can land after a row on the same line (unbuffered stdout)
    rows = [
        json.JSONDecoder().raw_decode(line, line.index("{"))[0]
        for line in text.splitlines()
        if '"RANK"' in line
    ]
    shown = ["torchrun " + " ".join(c[3:-1] + [f"scripts/{script.name}"]) for c in cmds]
    return TorchrunJob(
        shown, sorted(rows, key=lambda r: r["RANK"]), [p.returncode for p in procs], text
    )


def default_timeouts() -> dict[str, float | None]:
    """init_process_group's default timeout per backend, in seconds, from the installed torch.

    gloo (and every non-NCCL backend): ``torch.distributed.constants.default_pg_timeout``.
    NCCL: ``default_pg_nccl_timeout``, which a CPU-only build leaves None; then it is read from
    the C++ header the wheel ships (``kProcessGroupNCCLDefaultTimeout`` in ProcessGroupNCCL.hpp).
    """
    from torch.distributed import constants

    nccl = constants.default_pg_nccl_timeout
    nccl_s = nccl.total_seconds() if nccl is not None else _nccl_timeout_from_header()
    return {"gloo": constants.default_pg_timeout.total_seconds(), "nccl": nccl_s}


def timeout_rows(defaults: dict[str, float | None]) -> list[dict]:
    """Lab 00's table of init_process_group's default timeouts (``default_timeouts()``), minutes."""
    nccl = defaults["nccl"]
    return [
        {
            "backend": "gloo (and other non-NCCL)",
            "default timeout (min)": defaults["gloo"] / 60,
            "where in torch": "constants.default_pg_timeout",
        },
        {
            "backend": "nccl",
            "default timeout (min)": nccl and nccl / 60,
            "where in torch": "constants.default_pg_nccl_timeout"
            " (CPU builds: ProcessGroupNCCL.hpp)",
        },
    ]


def _nccl_timeout_from_header() -> float | None:
    header = (
        Path(torch.__file__).parent
        / "include"
        / "torch"
        / "csrc"
        / "distributed"
        / "c10d"
        / "ProcessGroupNCCL.hpp"
    )
    try:
        text = header.read_text()
    except OSError:
        return None
    found = re.search(
        r"kProcessGroupNCCLDefaultTimeout\s*=\s*std::chrono::milliseconds\(([\d\s*]+)\)", text
    )
    return math.prod(int(f) for f in found.group(1).split("*")) / 1000 if found else None
