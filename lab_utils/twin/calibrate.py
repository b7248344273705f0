"""Measure this machine as a cluster preset: its matmul FLOP/s and its gloo link (issue 35).

    .venv/bin/python -m lab_utils.twin.calibrate        # prints the numbers to store

``calc.hardware``'s "This machine" preset holds what this printed on the course's 2-core
machine (with the date, the load and the torch version): one CPU "GPU" per rank, the loopback
gloo link as both links. On a GPU machine the same measurement of bf16 matmuls is item 10 of
issue 35 (not done here: no GPU was lent).
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from lab_utils.calc.comm import fit_alpha_beta

SIZES = (4, 4096, 65536, 262144, 1048576)  # floats per all-reduce


def matmul_flops(n: int = 512, repeats: int = 20) -> float:
    """Best FLOP/s of an n x n fp32 matmul on one thread."""
    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def _sweep(ctx: object, repeats: int) -> list[float]:
    out = []
    for n in SIZES:
        t = torch.ones(n)
        dist.all_reduce(t)
        best = float("inf")
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            best = min(best, time.perf_counter() - t0)
        out.append(best)
    return out


def gloo_link(repeats: int = 20) -> tuple[float, float, float]:
    """(alpha s, bandwidth bytes/s, r^2) of a 2-rank gloo all-reduce sweep on this machine:
    t = 2 alpha + D / bw for n = 2 (calc.comm's ring), so alpha = intercept / 2."""
    from lab_utils.runtime.launch import run

    times = [max(ts) for ts in zip(*run(_sweep, 2, repeats, backend="gloo", quiet=True))]
    fit = fit_alpha_beta([4 * n for n in SIZES], times)
    return fit.alpha_s / 2, fit.bandwidth, fit.r2


if __name__ == "__main__":
    f = matmul_flops()
    a, bw, r2 = gloo_link()
    print(
        f"date {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, "
        f"load {os.getloadavg()[0]:.1f}, cores {os.cpu_count()}"
    )
    print(f"matmul fp32 512^3 one thread: {f / 1e9:.2f} GFLOP/s")
    print(
        f"gloo 2-rank all-reduce: alpha {1e6 * a:.1f} us, bandwidth {bw / 1e9:.3f} GB/s, "
        f"r^2 {r2:.3f}"
    )
