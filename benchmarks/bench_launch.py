"""Launcher overhead (issue 2): lab_utils.run of a trivial function vs a bare torchrun.

    .venv/bin/python benchmarks/bench_launch.py [--repeats 5] [--nproc 4]

Three timings, median of --repeats each:
  bare-empty   `torchrun --standalone --nproc-per-node N empty.py`: the literal floor (ranks
               import nothing and join nothing)
  bare-init    torchrun of a minimal distributed program (import torch.distributed,
               init_process_group(gloo), barrier, destroy): what any real experiment costs
  lab_utils    lab_utils.run(trivial, N) from an already-running Python (like a notebook)
Target: lab_utils / bare-empty <= 1.15.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lab_utils import run  # noqa: E402
from lab_utils.runtime.launch import oversubscription_note  # noqa: E402

MINIMAL = """
import datetime, gc, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
dist.barrier(); gc.collect(); dist.destroy_process_group()
"""


def trivial(ctx):
    return ctx.rank


def time_cmd(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--nproc", type=int, default=4)
    ns = parser.parse_args()
    tmp = tempfile.mkdtemp()
    empty, minimal = os.path.join(tmp, "empty.py"), os.path.join(tmp, "minimal.py")
    open(empty, "w").close()
    with open(minimal, "w") as f:
        f.write(MINIMAL)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ns.nproc}"]

    run(trivial, ns.nproc, quiet=True)  # warm-up: first import of torch in this process
    samples = {"bare-empty": [], "bare-init": [], "lab_utils": []}
    for _ in range(ns.repeats):  # interleaved, so drifting machine load hits all three alike
        samples["bare-empty"].append(time_cmd(torchrun + [empty]))
        samples["bare-init"].append(time_cmd(torchrun + [minimal]))
        start = time.perf_counter()
        assert run(trivial, ns.nproc, quiet=True) == list(range(ns.nproc))
        samples["lab_utils"].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"{ns.nproc} ranks, median of {ns.repeats}")
    for name, value in med.items():
        print(f"  {name:11} {value:6.2f} s   (runs: {', '.join(f'{x:.2f}' for x in samples[name])})")
    print(f"overhead ratio lab_utils / bare-empty = {med['lab_utils'] / med['bare-empty']:.2f}  (target <= 1.15)")
    print(f"              lab_utils / bare-init  = {med['lab_utils'] / med['bare-init']:.2f}")
    note = oversubscription_note(ns.nproc, "gloo")
    if note:
        print(note)


if __name__ == "__main__":
    main()
