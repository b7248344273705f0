"""The bisector's cost: wall time of one bisection at 4 ranks (issue 39), and of the whole zoo.

    .venv/bin/python benchmarks/bench_correctness.py [--repeats 5] [--bug tp_mesh_order]

Timings (median of --repeats, wall clock on THIS machine, the warm pool already started):
  one bisection   bisect(bug.buggy): the reference in this process (float64) + one pooled
                  4-rank run of the step with every output and gradient recorded and every
                  collective counted + reassembly and comparison
  plain step      the same 4-rank run without recorder or ledger (the step's own cost), so the
                  difference is what the bisector adds
  whole zoo       run_zoo(): every bug buggy and fixed (22 cases) in one 4-rank launch
On a 2-core machine 4 ranks are oversubscribed: these times measure this machine (the note
printed below says so); the target is only that one bisection stays interactive (< 5 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from lab_utils import ranks, run  # noqa: E402
from lab_utils.correctness import RankEnv, Recorder, bisect  # noqa: E402
from lab_utils.correctness.zoo import BUGS, run_zoo  # noqa: E402
from lab_utils.runtime.launch import oversubscription_note  # noqa: E402


def plain_step(ctx, case):
    """The case's step alone: a recorder that is never read, no ledger."""
    torch.manual_seed(case.seed)
    case.step(RankEnv(ctx), Recorder())
    return None


def median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--bug", default="tp_mesh_order", choices=[b.name for b in BUGS])
    ns = ap.parse_args()
    bug = next(b for b in BUGS if b.name == ns.bug)
    pool = ranks(bug.buggy.world_size, backend="gloo")
    try:
        bisect(bug.buggy)  # warm-up: imports on the ranks, the groups' first use
        one = median_s(lambda: bisect(bug.buggy), ns.repeats)
        plain = median_s(
            lambda: run(plain_step, bug.buggy.world_size, bug.buggy, quiet=True), ns.repeats
        )
        zoo = median_s(run_zoo, max(1, ns.repeats // 2))
    finally:
        pool.shutdown()
    print(oversubscription_note(bug.buggy.world_size, "gloo") or "")
    rows = [
        (f"one bisection ({bug.name}, {bug.buggy.world_size} ranks)", one),
        ("the plain step on the same ranks", plain),
        (f"the whole zoo, {2 * len(BUGS)} cases in one launch", zoo),
    ]
    for label, seconds in rows:
        print(f"{label:<45} {seconds:6.2f} s (measured, median)")
    ok = one < 5.0
    print(f"target: one bisection < 5 s: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
