"""Benchmark (lab 07): every from-scratch pipeline schedule's bubble on the EMULATED cluster.

The schedules (GPipe, 1F1B, interleaved 1F1B with v = 2, ZB-H1, ZB-H2) run on p gloo ranks under
``lab_utils.twin``: compute charged from the FLOPs each op really ran, each layer as a 4096-wide one
(``lab07.pipeline_scale``), at an H100's rate; messages by the links they cross. Two placements:
all stages in one DGX H100 node (NVLink), one stage per node (InfiniBand). The times are the
virtual clock's, so the rows are the same on a quiet or a loaded machine; what this machine's
load changes is only the wall time the emulation takes, reported per emulated step.

Bubble: idle / step per rank (``calc.bubble_from_timeline``), mean over ranks; ZB-H2: idle / own
span, slowest rank (its steady state). Formula: ``tables.bubble_formula`` (equal stages, t_f = T_B
= T_W, free messages). Target: for GPipe, 1F1B and interleaving the formula is a lower bound
(the emulated run adds the messages and the output layer's FLOPs on the last stage), so every such
row must sit at or above it, and one GPU per node at or above one node. The zero-bubble rows are
reported only: our W recomputes input gradients (about t_b, not t_b / 2), so their formula does
not apply.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_bubble.py [--p 4] [--m 4 8 16]
Exit status 1 when a row misses the target; the last line is "K/K rows within target".
"""

from __future__ import annotations

import argparse
import time

from lab_utils.experiments.lab07 import run_pipeline
from lab_utils.experiments.lab07.pipeline import pipeline_cluster, pipeline_scale
from lab_utils.experiments.lab07.tables import bubble_formula, measured_bubble
from lab_utils.viz import show_table

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2")
CLASSIC = ("gpipe", "1f1b", "interleaved")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p", type=int, default=4, help="pipeline stages = ranks")
    ap.add_argument("--m", type=int, nargs="+", default=[4, 8, 16], help="micro-batches")
    args = ap.parse_args()
    exps = [dict(schedule=s, m=m) for s in SCHEDULES for m in args.m]
    out, walls = {}, {}
    for where, across in (("one node", False), ("one GPU per node", True)):
        t0 = time.perf_counter()
        out[where] = run_pipeline(
            exps,
            args.p,
            pipeline_cluster(p=args.p, across_nodes=across),
            pipeline_scale(),
            timeout_s=900,
        )
        walls[where] = (time.perf_counter() - t0) / len(exps)
    rows, misses = [], 0
    for inside, spread in zip(out["one node"], out["one GPU per node"]):
        pred = bubble_formula(inside.schedule, args.p, inside.m, inside.v)
        a, b = measured_bubble(inside), measured_bubble(spread)
        ok = (inside.schedule not in CLASSIC) or (pred - 1e-9 <= a <= b)
        misses += not ok
        rows.append(
            {
                "schedule": inside.schedule + (f" v={inside.v}" if inside.v > 1 else ""),
                "m": inside.m,
                "formula": pred,
                "one node": a,
                "one GPU per node": b,
                "step one node (ms)": 1e3 * max(e["end"] for e in inside.events),
                "target": "ok" if ok else "MISS",
            }
        )
    show_table(
        rows,
        title=f"EMULATED bubble, p={args.p}, DGX H100 (wall per emulated step: "
        + ", ".join(f"{k} {v:.2f} s" for k, v in walls.items())
        + ", incl. launch)",
        fmt={
            "formula": "{:.3f}",
            "one node": "{:.3f}",
            "one GPU per node": "{:.3f}",
            "step one node (ms)": "{:.2f}",
        },
    )
    print(f"{len(rows) - misses}/{len(rows)} rows within target")
    return 1 if misses else 0


if __name__ == "__main__":
    raise SystemExit(main())
