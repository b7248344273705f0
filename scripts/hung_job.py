"""A job that hangs on purpose (lab 11): look at it from outside while it is stuck.

    TORCH_FR_BUFFER_SIZE=2000 torchrun --standalone --nproc-per-node=4 scripts/hung_job.py --out DIR
    kill -USR1 $(cat DIR/pid_rank0)       # rank 0 prints its Python stack to its stderr
    py-spy dump --pid $(cat DIR/pid_rank0)  # the same from outside, if py-spy is installed

Rank 0 calls an all-reduce that no other rank joins; the others wait in the next barrier. Each
rank writes its pid, registers faulthandler on SIGUSR1 and runs a watchdog that dumps the
collective flight recorder to DIR/fr_rank_<r> once it has made no progress for a second.
The job never ends by itself: kill it. Its body is lab_utils.experiments.lab11.faults.hung_job.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

from lab_utils.experiments.lab11.faults import hung_job  # noqa: E402
from lab_utils.runtime.context import distributed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--watchdog", type=float, default=1.0)
    args = parser.parse_args()
    with distributed("gloo", timeout_s=600.0) as ctx:  # long: we end it, not the timeout
        hung_job(ctx, args.out, watchdog_s=args.watchdog)


if __name__ == "__main__":
    main()
