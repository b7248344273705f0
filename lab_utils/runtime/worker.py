"""The program every rank runs (lab 00).

Three ways in:

* From the course launcher (``lab_utils.run``): torchrun forks this file with
  ``--run-path`` and passes ``<payload.pkl> <out_dir>``. The payload is
  ``(fn, args, kwargs, options)`` pickled with cloudpickle, so ``fn`` may be defined
  in a notebook cell. The return value (or the traceback) is written to
  ``out_dir/rank<k>.ok`` (or ``.err``) for the launcher to collect.
* A warm pool (``lab_utils.runtime.engine.pool``): ``<run_dir> --pool <socket>``. The rank sets up
  its process group ONCE, connects to the launcher's socket and serves jobs until told to stop
  (or until the launcher is gone): each job's result goes to ``<job_dir>/rank<k>.ok``, then the
  rank joins a barrier, undoes the job's side effects (``isolation.restore``), writes ``.done``
  and prints an end mark. A job that raised ends the rank: the pool is rebuilt by the next call.
* On a cluster: ``torchrun ... -m lab_utils.runtime.worker --target pkg.module:function``
  (what ``python -m lab_utils run ... --print-command`` prints). Results are printed.

Each rank's stdout/stderr lines get a ``[rank k]`` prefix so the launcher (and a
human reading a cluster log) can tell the ranks apart.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pickle
import sys
from typing import Any

# torchrun's --run-path runs this file by path, so the package may not be importable
# from sys.path yet; the launcher exports LAB_UTILS_ROOT for exactly this.
_root = os.environ.get("LAB_UTILS_ROOT")
if _root and _root not in sys.path:
    sys.path.insert(0, _root)

from lab_utils.runtime.engine.rank import (Marks, exit_now, install_prefix_streams,  # noqa: E402
                                    rank_setup, report_result, run_rank, write_record)


def _launcher_main(payload_path: str, out_dir: str) -> int:
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    with open(payload_path, "rb") as f:
        fn, args, kwargs, options = pickle.load(f)
    import torch  # already imported by the forked agent: free

    torch.set_num_threads(options["threads"])
    rank_setup(out_dir, rank, world_size, options["pg_timeout_s"])
    code = run_rank(fn, args, kwargs, options["backend"], options["pg_timeout_s"],
                    lambda r, value: report_result(out_dir, r, value),
                    lambda r, record: write_record(out_dir, r, "err", record))
    if code == 0:
        # Teardown finished (barrier, gc, destroy_process_group): tell the launcher this rank
        # is leaving on its own, so it can tell a clean exit from one it had to kill.
        open(os.path.join(out_dir, f"rank{rank}.done"), "w").close()
    return code


def _pool_main(run_dir: str, socket_path: str) -> int:
    from lab_utils.runtime.engine.serve import serve

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    rank_setup(run_dir, rank, world_size, 120.0)
    return serve(run_dir, socket_path, rank, Marks)


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

    def on_result(r: int, value: Any) -> None:
        print(f"result: {value!r}", flush=True)

    def on_error(r: int, record: dict) -> None:
        print(record["traceback"], file=sys.stderr, flush=True)

    return run_rank(fn, (), {}, ns.backend, ns.timeout, on_result, on_error)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--pool":
        exit_now(_pool_main(sys.argv[1], sys.argv[3]))
    if len(sys.argv) == 3 and not sys.argv[1].startswith("-"):
        exit_now(_launcher_main(sys.argv[1], sys.argv[2]))
    exit_now(_cluster_main(sys.argv[1:]))
