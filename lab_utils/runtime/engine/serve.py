"""A warm rank: set up once, then serve the launcher's jobs one after another (lab 00).

The launcher's side is ``pool.py``. A job is ``(kind, job_dir, body, options)``:
    "call"  body = a cloudpickled (fn, args, kwargs, options) as run() sends it
    "exec"  body = source code of a ``%%ranks`` cell, run in this rank's session namespace
    "pull"  body = a variable name of the session namespace, sent back as the result
    "stop"  leave cleanly (barrier, destroy the process group)

Per job: reset the documented starting state (``isolation.start_run``), run, write
``rank<k>.ok`` (the result) or ``rank<k>.err`` (the traceback; then this rank leaves at once,
because its peers may be stuck in a collective it will never join), join a barrier, undo the
job's side effects (``isolation.restore``), write ``rank<k>.done`` ("" or why the rank is
dirty) and print END_MARK, the last line of the job's output.
"""

from __future__ import annotations

import gc
import os
import sys
from multiprocessing.connection import Client
from typing import Any

import cloudpickle
import torch.distributed as dist

from lab_utils.runtime.context import distributed
from lab_utils.runtime.engine import isolation
from lab_utils.runtime.engine.rank import (
    dump_stacks_to,
    error_record,
    exit_now,
    report_result,
    write_record,
)

END_MARK = "\x1elab_utils:end"  # = jobs.END_MARK (not imported: jobs is the launcher's side)
# The pool's process group is made once, with a long timeout: gloo's point-to-point ops keep
# the timeout the group was created with (collectives follow each job's, see isolation.py),
# and a rank that FINISHED a job must outwait a stuck peer in the barrier after it, so the
# launcher's deadline, not this rank, ends the job and names the stuck rank.
# A one-job pool (a cold run) makes it with the run's own timeout (LAB_UTILS_PG_TIMEOUT).
IDLE_TIMEOUT_S = 1800.0


def serve(run_dir: str, socket_path: str, rank: int, marks: Any) -> int:
    backend = os.environ["LAB_UTILS_BACKEND"]
    with distributed(backend, float(os.environ.get("LAB_UTILS_PG_TIMEOUT", IDLE_TIMEOUT_S))) as ctx:
        gc.freeze()  # torch's objects: a per-job gc.collect() then scans only the job's
        conn = Client(
            socket_path, family="AF_UNIX", authkey=bytes.fromhex(os.environ["LAB_UTILS_POOL_KEY"])
        )
        conn.send((rank, os.getpid()))
        session: dict[str, Any] = {"ctx": ctx, "dist": dist, "torch": __import__("torch")}
        while True:
            try:
                kind, job_dir, body, options = cloudpickle.loads(conn.recv_bytes())
            except EOFError:  # the launcher is gone
                exit_now(0)
            if kind == "stop":
                break
            marks.folder = job_dir
            run_job(ctx, rank, kind, job_dir, body, options, session)
    return 0  # left distributed(): barrier, gc, destroy_process_group


def run_job(
    ctx: Any, rank: int, kind: str, job_dir: str, body: Any, options: dict, session: dict
) -> None:
    dump_stacks_to(job_dir, rank)
    if options.get("sys_path"):
        sys.path[:] = options["sys_path"]
    if options.get("cwd") and os.path.isdir(options["cwd"]):
        os.chdir(options["cwd"])
    # A run() call starts from the documented state and is undone after; %%ranks cells share
    # one interactive session (variables, RNG state, groups persist from cell to cell).
    before = isolation.start_run(options["threads"], options["pg_timeout_s"], fresh=kind == "call")
    try:
        if kind == "call":
            fn, args, kwargs, _ = cloudpickle.loads(body)
            result = fn(ctx, *args, **kwargs)
        elif kind == "exec":
            session["ctx"] = ctx
            exec(compile(body, "<%%ranks cell>", "exec"), session)  # the cell IS the program
            result = None
        elif kind == "pull":  # a missing name is a typo, not a reason to end the session
            result = (True, session[body]) if body in session else (False, None)
        else:
            raise ValueError(f"unknown job kind {kind!r}")
    except BaseException as exc:
        # Report first, then leave at once: the other ranks may be stuck in a collective this
        # rank will never join. The launcher tears the pool down and names this rank.
        write_record(job_dir, rank, "err", error_record(exc))
        exit_now(1)
    if not report_result(job_dir, rank, result):
        exit_now(1)
    del result
    try:
        isolation.set_timeout(IDLE_TIMEOUT_S)
        dist.barrier()  # every rank has finished the job's collectives
        gc.collect()  # drop the job's tensors and work handles now, not during the next job
        gc.freeze()  # what survives (modules the job imported) is never scanned again
        dirty = isolation.restore(before) if kind == "call" else ""
    except BaseException:  # a peer is stuck or gone: that rank is the story, not this one
        exit_now(1)
    with open(os.path.join(job_dir, f"rank{rank}.done"), "w") as f:
        f.write(dirty)
    sys.stdout.flush()
    sys.stderr.flush()
    print(END_MARK, flush=True)
