"""The emulated cluster's cost and determinism (issue 35), not a test.

    .venv/bin/python benchmarks/bench_twin.py [--nproc 8] [--load 8] [--steps 3]

1. Overhead: one torch-DDP step of lab 04's model on --nproc ranks, wall seconds inside the
   ranks (slowest rank, after a warm-up step), plain gloo vs emulated (2 DGX H100 nodes).
   Target: emulated <= 2 s on the 2-core machine.
2. Cost per emulated collective: 200 one-float all-reduces, emulated minus plain, per call.
3. Determinism: the emulated step times with the machine as it is, then with --load spinning
   processes started here (and ended here by pid), must agree within 1%. The 1-minute load
   average is printed beside each.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from lab_utils import run, twin  # noqa: E402
from lab_utils.models import GPTConfig, TinyGPT  # noqa: E402

CFG = GPTConfig(vocab_size=128, seq_len=32, n_layer=4, n_head=4, d_model=64)  # lab 04's


def ddp_steps(ctx, steps):
    from lab_utils.experiments.lab04 import make_ddp, train_step

    ddp = make_ddp("torch", TinyGPT(CFG, seed=0), 2**20)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    x = torch.randint(0, CFG.vocab_size, (4, CFG.seq_len))
    walls = []
    for _ in range(steps + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        train_step(ddp, opt, x, x)
        twin.step()
        walls.append(time.perf_counter() - t0)
    return walls[1:]


def many_all_reduces(ctx, n):
    t = torch.ones(1)
    dist.all_reduce(t)
    t0 = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(t)
    return time.perf_counter() - t0


def load1() -> float:
    return os.getloadavg()[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=8)
    ap.add_argument("--load", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    c = twin.Cluster.preset("DGX H100", nodes=2, gpus_per_node=a.nproc // 2)
    kw = dict(quiet=True, timeout_s=600)
    plain = run(ddp_steps, a.nproc, a.steps, backend="gloo", **kw)
    em = twin.emulate(ddp_steps, a.nproc, c, a.steps, **kw)
    wall_p = min(max(r[i] for r in plain) for i in range(a.steps))
    wall_e = min(max(r[i] for r in em.results) for i in range(a.steps))
    print(
        f"1. DDP step of lab 04's model, {a.nproc} ranks, {os.cpu_count()} cores "
        f"(load {load1():.1f}): wall per step plain {wall_p:.3f} s, emulated {wall_e:.3f} s "
        f"(target <= 2 s); emulated step {1e3 * em.step_times()[-1]:.3f} ms on {c.name}"
    )
    n = 200
    tp = max(run(many_all_reduces, a.nproc, n, backend="gloo", **kw))
    te = max(twin.emulate(many_all_reduces, a.nproc, c, n, **kw).results)
    print(
        f"2. one all-reduce (1 float, {a.nproc} ranks): plain {1e3 * tp / n:.2f} ms, "
        f"emulated {1e3 * te / n:.2f} ms: {1e3 * (te - tp) / n:.2f} ms per emulated call"
    )
    quiet = em.step_times()
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.load)]
    try:
        time.sleep(5)
        la = load1()
        loaded = twin.emulate(ddp_steps, a.nproc, c, a.steps, **kw).step_times()
    finally:
        for p in spin:
            p.kill()
            p.wait()
    worst = max(abs(x / y - 1) for x, y in zip(loaded, quiet))
    print(
        f"3. emulated step times (ms) as the machine was: {[round(1e3 * t, 4) for t in quiet]}"
        f"; with {a.load} spinning processes (load {la:.1f}): "
        f"{[round(1e3 * t, 4) for t in loaded]}; largest difference {100 * worst:.4f}% "
        f"(target <= 1%)"
    )


if __name__ == "__main__":
    main()
