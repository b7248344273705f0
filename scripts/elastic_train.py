"""An elastic training job (lab 11): run it under torchrun with --max-restarts.

    torchrun --standalone --nproc-per-node=4 --max-restarts=1 scripts/elastic_train.py \\
        --root /tmp/ckpt --log-dir /tmp/events --steps 8 --ckpt-every 2 --crash 2:5

Every attempt resumes from the newest complete DCP checkpoint under --root (none: a fresh start).
In attempt 0 (TORCHELASTIC_RESTART_COUNT=0) rank 2 dies in step 5; torchrun sees the failed
worker, stops the others, starts a new group of 4 (attempt 1), which resumes from the last
checkpoint and finishes. Every rank logs its events to --log-dir as they happen.
The training itself is lab_utils.experiments.lab11.elastic.elastic_train.
"""

import time

STARTED_AT = time.time()  # before any import: a restart's cost includes importing torch

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

from lab_utils.experiments.lab11 import RunConfig  # noqa: E402
from lab_utils.experiments.lab11.elastic import elastic_train  # noqa: E402
from lab_utils.runtime.context import distributed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="checkpoint directory (shared by attempts)")
    parser.add_argument("--log-dir", required=True, help="where every rank writes its events")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--ckpt-every", type=int, default=2)
    parser.add_argument("--crash", default="", help="RANK:STEP, injected in attempt 0 only")
    parser.add_argument("--pg-timeout", type=float, default=60.0)
    args = parser.parse_args()
    crash = tuple(int(v) for v in args.crash.split(":")) if args.crash else None
    cfg = RunConfig(steps=args.steps, ckpt_every=args.ckpt_every)
    with distributed("gloo", timeout_s=args.pg_timeout) as ctx:
        elastic_train(ctx, cfg, args.root, args.log_dir, crash=crash, started_at=STARTED_AT)


if __name__ == "__main__":
    main()
