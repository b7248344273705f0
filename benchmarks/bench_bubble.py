"""Benchmark (lab 07): every from-scratch pipeline schedule's measured bubble vs its formula.

SIMULATED-COMPUTE mode (lab_utils.experiments.lab07.SimCompute): every forward is padded to t_f,
every whole backward to t_b = 2 t_f, and the zero-bubble schedules' B and W to t_b / 2 each (so
t_f = T_B = T_W), with a sleep; p = 4 ranks on a 2-core machine then measure the SCHEDULE. One
launch runs GPipe, 1F1B, interleaved 1F1B (v = 2), ZB-H1 and ZB-H2 at m = 4, 8, 16, twice:

  measured          free_p2p=True: an op fed by a neighbour starts, on the recorded timeline,
                    when its input was ready on the sender (times shared through memory), as
                    the formulas assume (they count no communication time). Ends are real: a
                    rank that oversleeps or is not scheduled still shows. Best of --repeats.
  with p2p latency  the plain wall clock: each message adds ~0.5-1.5 ms from one process to the
                    next here (more on a loaded machine), on every hop of the critical path.
                    Interleaving, with v times the hops, pays the most. One step.

Bubble: idle / step per rank from the recorded spans (lab_utils.calc.bubble_from_timeline),
mean over ranks; the step = first start to last end over all ranks. ZB-H2's claim is about the
steady state, where consecutive steps overlap (Qi et al. 2023 Sec. 4: no global
synchronisation between steps): there each rank's cost is its OWN span and the rank with the
most idle sets the pace, so its row measures idle / own span, max over ranks ("steady").
Formula: lab_utils.calc.bubble, fraction of the step ("of_total"); for ZB-H2 the paper's
(p-1)(t_f + T_B - 2 T_W) >= 0 needs m >= 2p - 1 micro-batches for stage 0 to cover the first
round trip; with fewer, stage 0 idles (2p - 1 - m) T when t_f = T_B = T_W = T
(lab_utils.experiments.lab07.tables.bubble_formula, derived there). A rank that is not
scheduled for tens of ms only ever ADDS idle time, hence best of --repeats.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_bubble.py [--t-f 0.05] [--repeats 5]
Exit status 1 when a row misses the target; the last line is "K/K rows within 0.01 of the formula".
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from lab_utils.experiments.lab07 import SimCompute, run_pipeline
from lab_utils.experiments.lab07.tables import bubble_formula, measured_bubble
from lab_utils.viz import show_table

TARGET = 0.01
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--t-f", type=float, default=0.05, help="simulated forward time (s)")
    ap.add_argument("--p", type=int, default=4, help="pipeline stages = ranks")
    ap.add_argument("--m", type=int, nargs="+", default=[4, 8, 16], help="micro-batches")
    ap.add_argument("--repeats", type=int, default=5, help="timed steps per row (best kept)")
    args = ap.parse_args()
    exps = [dict(schedule=s, m=m, sim=SimCompute(args.t_f, free_p2p=free), repeats=reps)
            for free, reps in ((True, args.repeats), (False, 1)) for s in SCHEDULES
            for m in args.m]
    t0 = time.perf_counter()
    results = run_pipeline(exps, args.p, timeout_s=900)
    wall = time.perf_counter() - t0
    half = len(results) // 2
    rows, misses = [], 0
    for r, wall_clock in zip(results[:half], results[half:]):
        pred = bubble_formula(r.schedule, args.p, r.m, r.v)
        meas, with_latency = measured_bubble(r), measured_bubble(wall_clock)
        ok = abs(meas - pred) <= TARGET
        misses += not ok
        rows.append({"schedule": r.schedule + (f" v={r.v}" if r.v > 1 else ""), "m": r.m,
                     "window": "steady" if r.schedule == "zb-h2" else "step",
                     "formula": pred, "measured": meas, "diff": meas - pred,
                     "with p2p latency": with_latency, "peak in-flight": str(r.peak_in_flight),
                     "target": "ok" if ok else "MISS"})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    show_table(rows, title=f"SIMULATED COMPUTE: p={args.p}, t_f={args.t_f * 1e3:g} ms, "
               f"t_b={2 * args.t_f * 1e3:g} ms, T_B=T_W={args.t_f * 1e3:g} ms; best of "
               f"{args.repeats}; {wall:.1f} s incl. launch; load average {load:.1f}",
               fmt={"formula": "{:.3f}", "measured": "{:.3f}", "diff": "{:+.3f}",
                    "with p2p latency": "{:.3f}"})
    print(f"{len(rows) - misses}/{len(rows)} rows within {TARGET} of the formula")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
