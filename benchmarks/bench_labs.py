"""Quick-mode time of every lab against the issues' limits.

    .venv/bin/python benchmarks/bench_labs.py

Reads build/executed/timings.json, written by tests/test_notebooks.py during `make test`
(papermill, QUICK=True, one run per lab). Run `make test` first. Limits: lab 00 60 s,
labs 01-07 90 s, labs 08-12 120 s. Exit status 1 if a lab is over its limit or missing.
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMINGS = ROOT / "build" / "executed" / "timings.json"


def limit_s(lab: str) -> int:
    n = int(lab[:2])
    return 60 if n == 0 else 90 if n <= 7 else 120


def main() -> int:
    if not TIMINGS.exists():
        print(f"no {TIMINGS.relative_to(ROOT)}: run `make test` first")
        return 1
    timings = json.loads(TIMINGS.read_text())
    labs = sorted(p.stem for p in (ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))
    over = []
    print(f"{'lab':24} {'quick (s)':>9} {'limit (s)':>9}")
    for lab in labs:
        t = timings.get(lab)
        flag = "" if t is not None and t <= limit_s(lab) else "  <-- OVER" if t is not None else "  <-- missing"
        print(f"{lab:24} {t if t is not None else '-':>9} {limit_s(lab):>9}{flag}")
        if flag:
            over.append(lab)
    print(f"total {sum(timings.get(lab, 0) for lab in labs):.0f} s for {len(labs)} labs")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
