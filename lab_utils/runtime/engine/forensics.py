"""Failure forensics: what went wrong on the ranks, in one readable exception (lab 00).

The wait loop (jobs.py) collects what each rank left in the run's folder - rank<k>.ok (a
result), .err (a traceback), .term (stopped by torchrun), .stack (a Python stack dumped on
request at the deadline), forked<k> (its pid) - and this module turns them into RankFailure or
RankTimeout, naming the rank that CAUSED the failure rather than the ranks that suffered it.
"""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Any

import cloudpickle

from lab_utils.runtime.results import RankFailure, RankTimeout

_TIMEOUT_MARKERS = (
    "timed out",
    "timeout",
)  # matched case-insensitively (gloo: "Timed out waiting")
# What a rank raises when a PEER left (crashed, timed out and exited, was killed): a symptom.
_SYMPTOM_MARKERS = ("connection closed by peer", "connection reset by peer", "broken pipe")


def _is_symptom(record: dict) -> bool:
    return any(m in record["message"].lower() for m in _SYMPTOM_MARKERS)


def _process_gone(pid: int) -> bool:
    """True if pid has exited (gone, or a zombie its parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
    except OSError:  # no /proc (not Linux): fall back to a signal-0 probe
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            return True


def dead_ranks(out_dir: str, world_size: int) -> list[int]:
    """Ranks that died on their own: no result, no error, not stopped (no .term), process gone.

    os._exit, a segfault or the kernel's OOM killer leave no traceback; the other ranks then
    fail with "connection reset by peer" - symptoms. Called BEFORE the launcher kills anything.
    """
    dead = []
    for rank in range(world_size):
        if any(
            os.path.exists(os.path.join(out_dir, f"rank{rank}.{s}")) for s in ("ok", "err", "term")
        ):
            continue
        try:
            with open(os.path.join(out_dir, f"forked{rank}")) as f:
                pid = int(f.read())
        except (FileNotFoundError, ValueError):
            continue  # never started: not a death we can attribute
        if _process_gone(pid):
            dead.append(rank)
    return dead


def request_stacks(out_dir: str, world_size: int) -> None:
    """Ask every unfinished rank for its Python stack (SIGUSR1 -> faulthandler, see worker.py)."""
    asked = False
    for rank in range(world_size):
        mark = os.path.join(out_dir, f"forked{rank}")
        if os.path.exists(os.path.join(out_dir, f"rank{rank}.ok")) or not os.path.exists(mark):
            continue
        try:
            with open(mark) as f:
                os.kill(int(f.read()), signal.SIGUSR1)
            asked = True
        except (ValueError, ProcessLookupError):
            pass
    if asked:
        time.sleep(0.3)  # faulthandler writes from a signal handler: immediate, but not instant


def _is_launcher_frame(line: str) -> bool:
    """The first frame below the learner's code: the rank's job loop (serve.run_job)."""
    return "runtime/engine/serve.py" in line and "run_job" in line


def read_stacks(out_dir: str, world_size: int) -> dict[int, str]:
    stacks = {}
    for rank in range(world_size):
        path = os.path.join(out_dir, f"rank{rank}.stack")
        if os.path.exists(path):
            with open(path) as f:
                text = f.read().strip()
            # keep the learner's frames: everything above the worker's own run_rank frame
            lines = text.splitlines()
            cut = next((i for i, line in enumerate(lines) if _is_launcher_frame(line)), len(lines))
            if cut > 1:
                stacks[rank] = "\n".join(lines[:cut])
    return stacks


def read_notes(folder: str, world_size: int, suffix: str) -> dict[int, str]:
    """Each rank's non-empty ``rank<k>.<suffix>``: "peer", what a stuck rank's blocking send/recv
    waited for (``runtime/peer_note.py``); "fatal", the stacks of a rank a fatal signal ended."""
    notes = {}
    for rank in range(world_size):
        try:
            with open(os.path.join(folder, f"rank{rank}.{suffix}")) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text:
            notes[rank] = text
    return notes


def read_fatal(folder: str, world_size: int) -> dict[int, str]:
    """What killed each rank a fatal signal ended ("Fatal Python error: Aborted"), with the
    stack of its thread inside torch.distributed (else its last one), cut below the learner's
    code."""
    fatal = {}
    for rank, text in read_notes(folder, world_size, "fatal").items():
        head, *threads = text.split("\n\n")
        threads = [t for t in threads if "File " in t]
        if threads:
            main = next((t for t in threads if "distributed_c10d.py" in t), threads[-1])
            stack = main.splitlines()
            cut = next((i for i, line in enumerate(stack) if _is_launcher_frame(line)), len(stack))
            head += "\n" + "\n".join(stack[:cut])
        fatal[rank] = head
    return fatal


def read_records(out_dir: str, world_size: int) -> tuple[dict[int, Any], dict[int, dict]]:
    ok, err = {}, {}
    for rank in range(world_size):
        for suffix, store in (("ok", ok), ("err", err)):
            path = os.path.join(out_dir, f"rank{rank}.{suffix}")
            if os.path.exists(path):
                with open(path, "rb") as f:
                    store[rank] = cloudpickle.load(f)
    return ok, err


def _short(message: str) -> str:
    """First sentence of an error, without gloo's "[/path/to/pair.cc:553]" prefix."""
    message = re.sub(r"^\[[^\]]*\]\s*", "", message.strip())
    first = re.split(r"(?<=\.)\s", message, maxsplit=1)[0]
    return first if len(first) <= 90 else first[:87] + "..."


_FRAME = re.compile(r'File "([^"]+)", line (\d+),? in (\S+)')


def waiting_at(text: str) -> str | None:
    """The innermost frame of the learner's code in a traceback or faulthandler stack:
    "fn (file.py:12): source line". Frames inside torch and the launcher are skipped."""
    import linecache

    frames = [
        m.groups()
        for m in _FRAME.finditer(text)
        if "site-packages" not in m.group(1) and "/lab_utils/runtime/" not in m.group(1)
    ]
    if not frames:
        return None
    # tracebacks list the innermost frame last; faulthandler lists it first
    path, line, fn = frames[0] if "most recent call first" in text else frames[-1]
    source = linecache.getline(path, int(line)).strip()
    return f"{fn} ({os.path.basename(path)}:{line})" + (f": {source}" if source else "")


def collective_in(text: str) -> str | None:
    """The torch.distributed call a traceback or stack is inside ("all_reduce"), if any."""
    calls = [
        m.group(3) for m in _FRAME.finditer(text) if m.group(1).endswith("distributed_c10d.py")
    ]
    if not calls:
        return None
    return calls[0] if "most recent call first" in text else calls[-1]


# gloo's check when the bytes a rank receives do not fit the collective it is in: it aborts
_MISMATCH_MARKERS = ("collective mismatch", "doesn't match expected size")


def _mismatch(dead: list[int], fatal: dict[int, str], log: list[str]) -> bool:
    """Did gloo abort the dead ranks because the ranks were in different collectives?"""
    return (
        bool(dead)
        and all(r in fatal and collective_in(fatal[r]) for r in dead)
        and any(m in line.lower() for line in log for m in _MISMATCH_MARKERS)
    )


def _where(rank: int, text: str) -> str:
    """ "  rank 1 was in all_reduce, at fn (file.py:12): source line" """
    call, at = collective_in(text), waiting_at(text)
    return (
        f"  rank {rank} was " + (f"in {call}" if call else "running") + (f", at {at}" if at else "")
    )


def _mismatch_failure(
    ok: dict, err: dict, world_size: int, log: list[str], dead: list[int], fatal: dict[int, str]
) -> RankFailure:
    """Ranks in different collectives at once (one ran fewer steps and went on): a hang that gloo
    noticed, because the data that arrived did not fit, and ended by aborting ranks."""
    unfinished = [r for r in range(world_size) if r not in ok]
    texts = {**{r: rec["traceback"] for r, rec in err.items()}, **{r: fatal[r] for r in dead}}
    msg = (
        f"{fmt_ranks(unfinished)} did not finish: the ranks were inside DIFFERENT collectives "
        "at the same time, each waiting for the others to join its own (a collective "
        "mismatch: the ranks did not call the same collectives in the same order, e.g. one "
        "rank ran fewer steps and went on to the next collective while its peers were still "
        f"in a step). gloo saw data that did not fit and aborted {fmt_ranks(dead)}: a hang "
        "caught early, not a crash (no segfault, nothing ran out of memory)."
        + (f" Finished: {fmt_ranks(ok)}." if ok else "")
        + "\n"
        + "\n".join(_where(r, t) for r, t in sorted(texts.items()))
    )
    first = min(dead)
    msg += f"\n\nWhere rank {first} was (its Python stack when gloo aborted it):\n{fatal[first]}"
    return RankTimeout(msg, texts, log, unfinished)


def _returned_early(ok: dict, texts: dict[int, str], unfinished: list[int]) -> str:
    """A rank that RETURNED while a peer was still inside a collective: a count mismatch."""
    inside = {r: c for r in unfinished if r in texts and (c := collective_in(texts[r]))}
    if not ok or not inside:
        return ""
    stuck = ", ".join(f"rank {r} was still inside {c}" for r, c in sorted(inside.items()))
    them = "it" if len(ok) == 1 else "them"
    return (
        f"\n{fmt_ranks(ok)} returned while {stuck}, waiting for {them}: "
        f"{fmt_ranks(inside)} made a call that {fmt_ranks(ok)} never matched (a "
        "collective-count mismatch, e.g. one rank ran a step more than the others)."
    )


_PEER = re.compile(r"blocking (send|recv) (?:to|from) rank (\d+)$")


def wait_cycle(peers: dict[int, str]) -> str:
    """ "rank 0 -> rank 1 -> rank 0" when the blocked sends/recvs wait for each other in a cycle."""
    waits = {r: int(m.group(2)) for r, note in peers.items() if (m := _PEER.match(note))}
    for start in sorted(waits):
        path, r = [start], waits[start]
        while r in waits and r not in path:
            path.append(r)
            r = waits[r]
        if r in path:
            loop = path[path.index(r) :] + [r]
            return (
                "\nWho waited for whom: "
                + " -> ".join(f"rank {k}" for k in loop)
                + ": a cycle, each blocked until the next one moves, so none ever does."
            )
    return ""


def fmt_ranks(ranks) -> str:
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def failure(
    ok: dict,
    err: dict,
    world_size: int,
    log: list[str],
    deadline_hit: bool,
    timeout_s: float,
    stacks: dict[int, str],
    dead: list[int],
    peers: dict[int, str] | None = None,
    fatal: dict[int, str] | None = None,
) -> RankFailure:
    """Turn the ranks' reports into one readable exception. ``peers``: what a stuck rank's
    blocking send/recv was waiting for ("blocking recv from rank 1", runtime/peer_note.py);
    ``fatal``: the stacks of ranks that a fatal signal ended (gloo's abort, a segfault)."""
    peers, fatal = peers or {}, fatal or {}
    # A rank that delivered its result is finished, whatever its teardown did afterwards.
    err = {r: rec for r, rec in err.items() if r not in ok}
    unfinished = [r for r in range(world_size) if r not in ok]
    tracebacks = {r: rec["traceback"] for r, rec in err.items()}
    # A rank whose peer timed out and left sees "connection closed": judge by the causes.
    causes = {r: rec for r, rec in err.items() if not _is_symptom(rec)} or err
    all_timeouts = bool(causes) and all(
        any(m in rec["message"].lower() for m in _TIMEOUT_MARKERS) for rec in causes.values()
    )
    if deadline_hit or all_timeouts:
        why = (
            "the process group's timeout expired in the waiting ranks"
            if all_timeouts
            else f"the run's deadline of {timeout_s:g} s passed"
        )
        msg = (
            f"{fmt_ranks(unfinished)} did not finish: {why}. "
            + (f"Finished: {fmt_ranks(ok)}. " if ok else "")
            + "A rank stuck in a collective usually means the ranks did not call the same "
            "collectives in the same order (an `if rank == 0:` around a collective, uneven "
            "batches giving one rank an extra step, a send without its recv)."
        )
        where = {r: waiting_at(t) for r, t in {**stacks, **tracebacks}.items() if r in unfinished}
        if any(where.values()):
            msg += "\n" + "\n".join(
                f"  rank {r} was waiting in {w}" + (f"  <- {peers[r]}" if r in peers else "")
                for r, w in sorted(where.items())
                if w
            )
        msg += wait_cycle(peers) + _returned_early(ok, {**stacks, **tracebacks}, unfinished)
        if tracebacks:
            first = min(causes) if all_timeouts else min(tracebacks)
            msg += f"\n\nWhere rank {first} was waiting:\n{tracebacks[first]}"
        elif stacks:
            first = min(stacks)
            msg += (
                f"\n\nWhere rank {first} was waiting (its Python stack at the deadline, innermost "
                f"first):\n{stacks[first]}"
            )
            tracebacks = dict(stacks)
        return RankTimeout(msg, tracebacks, log, unfinished)
    # A rank that raised a real error (not a lost-peer symptom) is the story even when another
    # rank then died silently: a peer vanishing mid-collective can abort gloo in C++ (seen under
    # load: rank 1 raised ValueError, rank 0 was gone 1 s later without a word).
    raised = {r: rec for r, rec in err.items() if not _is_symptom(rec)}
    if not raised and _mismatch(dead, fatal, log):
        return _mismatch_failure(ok, err, world_size, log, dead, fatal)
    if dead and not raised:
        last_words = [line for line in log if any(line.startswith(f"[rank {r}] ") for r in dead)][
            -5:
        ]
        msg = (
            f"{fmt_ranks(dead)} died without reporting an error (os._exit, a segfault, or killed "
            "by the operating system, e.g. out of memory)."
            + (
                f"\n{fmt_ranks(err)} failed after it: "
                + "; ".join(
                    sorted({f"{rec['type']}: {_short(rec['message'])}" for rec in err.values()})
                )
                + " - symptoms of the lost rank, not causes."
                if err
                else ""
            )
            + "".join(
                f"\nrank {r} was ended by a fatal signal ({fatal[r].splitlines()[0]}),"
                f" at {waiting_at(fatal[r]) or 'a line outside your code'}"
                for r in dead
                if r in fatal
            )
            + ("\nLast output of the dead rank(s):\n" + "\n".join(last_words) if last_words else "")
        )
        return RankFailure(msg, tracebacks, log, dead)
    if not err:
        tail = "\n".join(log[-30:])
        return RankFailure(
            f"{fmt_ranks(unfinished)} exited without reporting a result (killed, "
            f"out of memory, or os._exit?). Last output:\n{tail}",
            {},
            log,
        )
    first = min(raised or err, key=lambda r: (err[r].get("_seen", 0), r))
    followers = [r for r in err if r != first]
    stopped = [r for r in unfinished if r not in err and r not in dead]
    msg = (
        f"rank {first} raised {err[first]['type']}: {err[first]['message']}"
        + (
            f"\n({fmt_ranks(followers)} failed after it, typically a lost connection to rank "
            f"{first})"
            if followers
            else ""
        )
        + (
            f"\n({fmt_ranks(dead)} then died without a report: a symptom of the lost peer)"
            if dead
            else ""
        )
        + (f"\n({fmt_ranks(stopped)} stopped by the launcher)" if stopped else "")
        + f"\n\nOriginal traceback on rank {first}:\n{err[first]['traceback']}"
    )
    return RankFailure(msg, tracebacks, log)
