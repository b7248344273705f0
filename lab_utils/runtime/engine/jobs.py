"""One job on the ranks, from the launcher's side: stream their output until every rank is
done, one failed, or the deadline passed; then each rank's result, or the one exception that
explains the failure (``forensics.py``). A cold run is a pool's one job: the same loop.

A rank leaves marks in the job's folder (``rank.py``): ``.ok`` its result, ``.err`` its
traceback, ``.done`` its clean-up finished; its last line of a job is END_MARK.
"""

from __future__ import annotations

import os
import queue
import time
from dataclasses import dataclass, field

from lab_utils.runtime.engine.forensics import (
    dead_ranks,
    failure,
    fmt_ranks,
    read_fatal,
    read_notes,
    read_records,
    read_stacks,
    request_stacks,
)
from lab_utils.runtime.engine.process import Agent
from lab_utils.runtime.engine.status import StatusLine
from lab_utils.runtime.results import RunResults

RESULT_GRACE_S = 1.0  # after a first failure, how long to wait for the other ranks' reports
TEARDOWN_GRACE_S = 5.0  # after every result is in, how long teardown may take before a kill
END_MARK = "\x1elab_utils:end"  # a rank's last line of a pooled job: its output is complete


@dataclass
class Outcome:
    """How waiting for the ranks of one run ended."""

    log: list[str]
    deadline_hit: bool = False
    failed: bool = False  # a rank reported an error
    exited: int = 0  # ranks that finished their clean-up (.done)
    dead: list[int] = field(default_factory=list)
    elapsed_s: float = 0.0
    closed: bool = False  # the ranks' output reached end-of-file


def _echo(line: str, log: list[str], quiet: bool) -> None:
    log.append(line)
    if not quiet and line.startswith("[rank "):
        print(line, flush=True)


def wait_for_ranks(
    agent: Agent, run_dir: str, world_size: int, timeout_s: float, quiet: bool, start: float
) -> Outcome:
    """Stream the ranks' output until every rank is done, one failed, or the deadline passed.

    A job is complete when every rank wrote ``.done`` and printed its END_MARK (so all its output
    has been echoed).
    On a failure or a deadline, the ranks are NOT killed here: the caller asks for stacks first.
    In a notebook a live status line shows the wait after 2 s (``status.py``); else, unless
    quiet, a progress line every 10 s.
    """
    out = Outcome(log=[])
    status = StatusLine(world_size)
    try:
        _wait(agent, run_dir, world_size, timeout_s, quiet, start, out, status)
    finally:
        status.clear()
    # line None, end-of-file: the agent and every rank have closed their output, i.e. exited. The
    # agent's pidfd may turn readable a moment later (a process's files are closed before its exit
    # is announced), so running() can still say True here.
    if out.failed or out.closed or not agent.running():
        out.dead = dead_ranks(run_dir, world_size)
    if out.deadline_hit:
        request_stacks(run_dir, world_size)
    out.elapsed_s = time.perf_counter() - start
    return out


def _wait(
    agent: Agent,
    run_dir: str,
    world_size: int,
    timeout_s: float,
    quiet: bool,
    start: float,
    out: Outcome,
    status: StatusLine,
) -> None:
    first_error_at = all_done_at = None
    ended: set[int] = set()
    next_progress = start + 10.0
    while True:
        try:
            line = agent.lines.get(timeout=0.05)
        except queue.Empty:
            line = ""
        if line and END_MARK in line:
            ended.add(int(line[len("[rank ") : line.index("]")]))
        elif line:
            _echo(line, out.log, quiet)
        now = time.perf_counter()
        names = os.listdir(run_dir)
        done = {n for n in names if n.endswith(".ok")}
        out.exited = sum(n.endswith(".done") for n in names)
        if first_error_at is None and any(n.endswith(".err") for n in names):
            first_error_at = now
        if out.exited == world_size and len(ended) == world_size:
            break  # every rank reported and cleaned up
        if len(done) == world_size:
            all_done_at = all_done_at or now
            if now - all_done_at > TEARDOWN_GRACE_S:
                break  # results are safe; a clean-up this slow is reported, not waited for
        if line is None or (not agent.running() and agent.lines.empty()):
            break
        if first_error_at is not None and now - first_error_at > RESULT_GRACE_S:
            break  # give the others a moment to report, then stop them
        if now - start > timeout_s:
            out.deadline_hit = True
            break
        status.tick(now - start, len(done))
        if not quiet and not status.enabled and now > next_progress:
            waiting = [r for r in range(world_size) if f"rank{r}.ok" not in done]
            print(
                f"[lab_utils] {now - start:.0f} s: {len(done)}/{world_size} ranks done; "
                f"waiting for {fmt_ranks(waiting)}",
                flush=True,
            )
            next_progress = now + 10.0
    out.failed = first_error_at is not None
    out.closed = line is None


def drain(agent: Agent, log: list[str], quiet: bool) -> None:
    """Echo what the ranks printed before they were stopped."""
    while True:
        try:
            line = agent.lines.get_nowait()
        except queue.Empty:
            return
        if line and END_MARK not in line:
            _echo(line, log, quiet)


def collect(run_dir: str, world_size: int, out: Outcome, timeout_s: float) -> RunResults:
    """Per-rank results in rank order, or the one exception that explains the failure."""
    ok, err = read_records(run_dir, world_size)
    stacks = read_stacks(run_dir, world_size)
    for rank, record in err.items():
        record["_seen"] = os.path.getmtime(os.path.join(run_dir, f"rank{rank}.err"))
    if len(ok) < world_size:  # errors after a delivered result (clean-up) do not fail the run
        exc = failure(
            ok,
            err,
            world_size,
            out.log,
            out.deadline_hit,
            timeout_s,
            stacks,
            out.dead,
            read_notes(run_dir, world_size, "peer"),
            read_fatal(run_dir, world_size),
        )
        exc.elapsed_s = out.elapsed_s  # from the start of the ranks' work to the failure
        raise exc
    results = RunResults(ok[r] for r in range(world_size))
    results.elapsed_s = out.elapsed_s
    results.world_size = world_size
    results.cleaned = out.exited
    results.clean_exit = out.exited == world_size
    results.log = out.log
    return results
