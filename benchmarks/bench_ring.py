"""Speed goal: our ring all-reduce (send/recv) reaches >= 0.5 x gloo's all_reduce throughput.

    cd /work/main && PYTHONPATH=. .venv/bin/python benchmarks/bench_ring.py [--mb 16 --reps 7]

One launch of 4 ranks; each rank holds a float32 tensor of --mb MB (16 MB = 4 Mi floats). In
every round each implementation runs once (round-robin, so slow drifts of a shared machine hit
both alike) after a barrier; a round's time is the SLOWEST rank's (the all-reduce is done when
the last rank has the sum). We report the median over rounds and the throughput ratio
ring / gloo = t_gloo / t_ring. Both move 2(N-1)/N x D bytes per rank (checked by the ledger in
tests/test_collectives.py), so the ratio measures the implementation: Python-driven steps and
one chunk in flight per step (ours) vs gloo's C++ ring. Exit code 1 when the goal is missed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist

from lab_utils import run
from lab_utils.calc import MB, alg_bandwidth, bus_bandwidth
from lab_utils.parallel.collectives import IMPLEMENTATIONS
from lab_utils.runtime.launch import oversubscription_note

GOAL = 0.5  # ring throughput / gloo throughput
IMPLS = ("gloo", "ring")


def bench(ctx, size_bytes: int, reps: int, warmup: int = 2) -> dict[str, list[float]]:
    x = {name: torch.ones(size_bytes // 4, dtype=torch.float32) for name in IMPLS}
    times: dict[str, list[float]] = {name: [] for name in IMPLS}
    for i in range(warmup + reps):
        for name in IMPLS:
            dist.barrier()
            t0 = time.perf_counter()
            IMPLEMENTATIONS[name](x[name], ctx.group)
            slowest = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # done when the last rank is
            if i >= warmup:
                times[name].append(slowest.item())
    # both sum ones over N ranks `warmup + reps` times: same values, a cheap sanity check
    if not torch.equal(x["gloo"], x["ring"]):
        raise RuntimeError("ring and gloo results differ")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=16.0, help="tensor size in MB (1e6 bytes)")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--reps", type=int, default=7, help="timed rounds (median; >= 5)")
    args = parser.parse_args()
    size = int(args.mb * MB) // 4 * 4
    times = run(bench, args.ranks, size, max(5, args.reps), timeout_s=300, quiet=True)[0]
    note = oversubscription_note(args.ranks, "gloo")
    print(
        f"all-reduce of {size / MB:.1f} MB float32 on {args.ranks} ranks (gloo, CPU), "
        f"median of {len(times['gloo'])} rounds"
    )
    med = {name: statistics.median(t) for name, t in times.items()}
    for name in IMPLS:
        algbw = alg_bandwidth(size, med[name])
        print(
            f"  {name:5s} {med[name] * 1e3:8.1f} ms   algbw {algbw / 1e9:6.2f} GB/s   "
            f"busbw {bus_bandwidth('all_reduce', args.ranks, algbw) / 1e9:6.2f} GB/s"
        )
    ratio = med["gloo"] / med["ring"]
    verdict = "meets" if ratio >= GOAL else "MISSES"
    print(f"ring / gloo throughput = {ratio:.2f} ({verdict} the goal >= {GOAL})")
    if note:
        print(note)
    return 0 if ratio >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
