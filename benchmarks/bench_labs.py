"""Quick-mode time of every lab against the issues' limits, each lab run alone.

    .venv/bin/python benchmarks/bench_labs.py [--labs 03 09]

Runs each lab top to bottom in quick mode with papermill (one after another, so a lab's time is
its own, not shared with other workers), writing build/executed/quick/. Limits: lab 00 60 s,
labs 01-07 90 s, lab 08 120 s, lab 09 (MoE) 60 s, lab 10 120 s, lab 11 (production) 90 s,
lab 12 120 s. Also prints the full-mode time of each lab from the last `make test`
(build/executed/full/timings/). Exit status 1 if a lab is over its limit or failed.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab_utils.tools.nbtools import execute  # noqa: E402

LIMITS = {0: 60, 8: 120, 9: 60, 10: 120, 11: 90, 12: 120}  # others (01-07): 90 s
FULL = ROOT / "build" / "executed" / "full" / "timings"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--labs", nargs="*", help="lab numbers (default: all)")
    ns = parser.parse_args()
    labs = sorted(
        p
        for p in (ROOT / "labs").glob("[0-9][0-9]_*.ipynb")
        if not ns.labs or p.name[:2] in ns.labs
    )
    out = ROOT / "build" / "executed" / "quick"
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'lab':24} {'quick (s)':>9} {'limit (s)':>9} {'full (s)':>9}")
    bad = []
    for path in labs:
        limit = LIMITS.get(int(path.name[:2]), 90)
        start = time.perf_counter()
        try:
            execute(path, out / path.name, quick=True)
            seconds, flag = time.perf_counter() - start, ""
        except Exception as exc:  # noqa: BLE001 - report every lab
            seconds, flag = (
                time.perf_counter() - start,
                f"  <-- FAILED: {str(exc).splitlines()[0][:60]}",
            )
        if not flag and seconds > limit:
            flag = "  <-- OVER"
        full = FULL / f"{path.stem}.json"
        full_s = json.loads(full.read_text())["seconds"] if full.exists() else "-"
        print(f"{path.stem:24} {seconds:9.1f} {limit:9} {full_s:>9}{flag}", flush=True)
        if flag:
            bad.append(path.stem)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
