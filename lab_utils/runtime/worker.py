"""The program every rank runs (lab 00).

Two ways in:

* From the course launcher (``lab_utils.run``), warm or cold alike: ``<run_dir> --pool <socket>``
  (``engine/pool.py``; a cold run is a pool that serves one job). The rank sets up its process
  group ONCE, connects to the launcher's socket and serves jobs until told to stop (or until the
  launcher is gone): each job's result goes to ``<job_dir>/rank<k>.ok`` (``.err`` a traceback),
  then the rank joins a barrier, undoes the job's side effects (``isolation.restore``), writes
  ``.done`` and prints an end mark. A job that raised ends the rank. Told to stop, it leaves the
  process group cleanly and writes ``<run_dir>/rank<k>.left``.
* On a cluster: ``torchrun ... -m lab_utils.runtime.worker --target pkg.module:function``
  (what ``python -m lab_utils run ... --print-command`` prints). Results are printed.

Each rank's stdout/stderr lines get a ``[rank k]`` prefix so the launcher (and a
human reading a cluster log) can tell the ranks apart.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

# torchrun's --run-path runs this file by path, so the package may not be importable
# from sys.path yet; the launcher exports LAB_UTILS_ROOT for exactly this.
_root = os.environ.get("LAB_UTILS_ROOT")
if _root and _root not in sys.path:
    sys.path.insert(0, _root)

from lab_utils.runtime.context import distributed  # noqa: E402
from lab_utils.runtime.engine.rank import (  # noqa: E402
    Marks,
    exit_now,
    install_prefix_streams,
    rank_setup,
)


def _pool_main(run_dir: str, socket_path: str) -> int:
    from lab_utils.runtime.engine.serve import serve

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    rank_setup(run_dir, rank, world_size, 120.0)
    code = serve(run_dir, socket_path, rank, Marks)
    if code == 0:  # left the process group cleanly (barrier, gc, destroy): the launcher counts it
        open(os.path.join(run_dir, f"rank{rank}.left"), "w").close()
    return code


def _cluster_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab_utils.runtime.worker")
    parser.add_argument("--target", required=True, help="pkg.module:function")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--timeout", type=float, default=300.0, help="process-group timeout, s")
    ns = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    install_prefix_streams(rank)
    module_name, _, fn_name = ns.target.partition(":")
    fn = getattr(importlib.import_module(module_name), fn_name)

    try:
        with distributed(ns.backend, ns.timeout) as ctx:
            print(f"result: {fn(ctx)!r}", flush=True)
    except BaseException:  # the traceback, then leave at once (no interpreter teardown)
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--pool":
        exit_now(_pool_main(sys.argv[1], sys.argv[3]))
    exit_now(_cluster_main(sys.argv[1:]))
