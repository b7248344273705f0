"""Ideal-timeline simulator of pipeline schedules (lab 07): who runs what, when.

``schedule`` lists each rank's operations in the schedule's order and plays them with no
communication cost: an operation starts when its rank is free and its dependency is done. The
closed forms it is checked against (bubble, peak in-flight micro-batches) live in
``calc.pipeline``; ``calc.timeline.bubble_from_timeline`` reads the idle time off ``events``.
Notation as in ``calc.pipeline``: p stages, m micro-batches, v chunks per rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import (
    backward_split,
    choice,
    interleaved_shape,
    nonneg_int,
    nonneg_num,
    one_chunk,
    pos_int,
    pos_num,
)

# A simulation is list scheduling over p*m*v*3 operations (quadratic in p); beyond this many a
# figure is unreadable and the call would take minutes.
MAX_OPS = 60_000


@dataclass(frozen=True)
class Event:
    """One operation on one rank: kind 'F' (forward), 'B' (backward; input grad only in
    zero-bubble schedules) or 'W' (weight grad), of ``microbatch`` on model ``chunk``."""

    rank: int
    kind: str
    microbatch: int
    chunk: int
    start: float
    end: float

    def __post_init__(self) -> None:
        nonneg_int("Event.rank", self.rank)
        choice("Event.kind", self.kind, ("F", "B", "W"))
        nonneg_int("Event.microbatch", self.microbatch)
        nonneg_int("Event.chunk", self.chunk)
        # an ideal timeline starts at 0 (measured timelines are plain dicts, any origin)
        start = nonneg_num("Event.start", self.start)
        end = nonneg_num("Event.end", self.end)
        if end < start:
            raise ValueError(
                f"Event.end={end} is before Event.start={start}; an operation ends after it starts"
            )


@dataclass(frozen=True)
class Schedule:
    """An ideal (no communication cost) timeline. ``order[r]`` lists rank r's operations as
    labels "F0", "B3", "W3" (with "c1" appended for chunk 1 when v > 1).
    ``peak_in_flight[r]`` is the most micro-batches (x chunks) whose activations rank r held
    at once: from a micro-batch's F until its last backward op (B, or W when split)."""

    name: str
    p: int
    m: int
    v: int
    events: tuple[Event, ...]
    order: tuple[tuple[str, ...], ...]
    peak_in_flight: tuple[int, ...]
    makespan: float


def _order_gpipe(p: int, m: int, r: int) -> list[tuple[str, int, int]]:
    # All forwards, then all backwards: every stage holds all m micro-batches at the peak.
    return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]


def _order_1f1b(p: int, m: int, r: int) -> list[tuple[str, int, int]]:
    warm = min(p - r - 1, m)  # warm-up: fill the pipe downstream of this stage
    ops = [("F", i, 0) for i in range(warm)]
    for j in range(m - warm):  # steady state: one forward, one backward
        ops += [("F", warm + j, 0), ("B", j, 0)]
    ops += [("B", j, 0) for j in range(m - warm, m)]  # cool-down: drain the backwards
    return ops


def _order_interleaved(p: int, m: int, v: int, r: int) -> list[tuple[str, int, int]]:
    # Megatron-LM forward_backward_pipelining_with_interleaving (Narayanan et al. 2021):
    # virtual micro-batch k walks chunks in groups of p micro-batches.
    total = m * v

    def unit(k: int, forward: bool) -> tuple[int, int]:
        in_group = k % (p * v)
        chunk = in_group // p
        return (k // (p * v)) * p + k % p, (chunk if forward else v - 1 - chunk)

    if m == p:  # Megatron: all forwards first when there are just p micro-batches
        warm = total
    else:
        warm = min((p - r - 1) * 2 + (v - 1) * p, total)
    ops = [("F", *unit(k, True)) for k in range(warm)]
    for k in range(total - warm):
        ops += [("F", *unit(k + warm, True)), ("B", *unit(k, False))]
    ops += [("B", *unit(k, False)) for k in range(total - warm, total)]
    return ops


def _dep(kind: str, mb: int, vs: int, n_virtual: int) -> tuple[str, int, int] | None:
    """The operation an F or B waits for (W only waits for its own B, see _simulate)."""
    if kind == "F":
        return ("F", mb, vs - 1) if vs > 0 else None
    return ("B", mb, vs + 1) if vs < n_virtual - 1 else ("F", mb, vs)


def schedule(
    name: str,
    p: int,
    m: int,
    v: int = 1,
    t_f: float = 1.0,
    t_b: float = 2.0,
    t_w: float | None = None,
) -> Schedule:
    """Simulate the ideal timeline of a pipeline schedule (no communication time).

    Each rank runs its operations in the schedule's ORDER; an operation starts when the rank
    is free AND its dependency is done: F of micro-batch i on stage s after F_i on s-1,
    B_i on s after B_i on s+1 (the last stage after its own F_i), W_i after B_i.
    Orders: gpipe all F then all B (Huang et al. 2019); 1f1b warm-up p-s-1 forwards, steady
    F/B pairs, cool-down (Narayanan et al. 2021 Sec. 2.2.1); interleaved per Megatron-LM
    (Sec. 2.2.2, chunk c of rank r is virtual stage c*p + r, times t_f/v and t_b/v);
    zb-h1 (Qi et al. 2023 Sec. 2.1) keeps 1F1B's F/B order with B = input gradient
    (t_b - t_w) and runs a deferred W whenever the next F/B is not ready, at most p
    micro-batches in flight. zb-h2 relies on overlapping consecutive steps, which a one-step
    simulation cannot show; use ``bubble('zb-h2', ...)``. Lab 07.
    """
    choice("name", name, ("gpipe", "1f1b", "interleaved", "zb-h1"))
    p, m, v = pos_int("p", p), pos_int("m", m), pos_int("v", v)
    t_f, t_b = pos_num("t_f", t_f), pos_num("t_b", t_b)
    if name == "interleaved":
        interleaved_shape(p, m, v)
    else:
        one_chunk(v)
    if p * m * v * 3 > MAX_OPS:
        raise ValueError(
            f"p*m*v = {p * m * v} micro-batch chunks is too many to simulate "
            f"(keep p*m*v <= {MAX_OPS // 3}); the closed forms in calc.pipeline "
            "(bubble, peak_in_flight) answer for any size"
        )
    split = name == "zb-h1"
    w_time = backward_split(t_b, t_w) if split else 0.0
    if not split and t_w is not None:
        raise ValueError(
            f"t_w only applies to the zero-bubble schedule 'zb-h1' (B and W "
            f"split); leave it out for {name!r}"
        )
    dur = {"F": t_f / v, "B": (t_b - w_time) / v, "W": w_time / v}
    builders = {
        "gpipe": lambda r: _order_gpipe(p, m, r),
        "1f1b": lambda r: _order_1f1b(p, m, r),
        "zb-h1": lambda r: _order_1f1b(p, m, r),
        "interleaved": lambda r: _order_interleaved(p, m, v, r),
    }
    orders = [builders[name](r) for r in range(p)]
    events = _simulate(p, v, orders, dur, split, cap=p)
    return _finish(name, p, m, v, events, split)


def _simulate(
    p: int,
    v: int,
    orders: list[list[tuple[str, int, int]]],
    dur: dict[str, float],
    split: bool,
    cap: int,
) -> list[Event]:
    """Commit operations in order of start time (list scheduling), so that when a rank
    decides, everything that could finish before its decision is already known."""
    n_virtual = p * v
    done: dict[tuple[str, int, int], float] = {}
    free, nxt = [0.0] * p, [0] * p
    pending_w: list[list[tuple[int, int]]] = [[] for _ in range(p)]
    in_flight = [0] * p
    n_ops = sum(len(o) for o in orders) + (sum(len(o) for o in orders) // 2 if split else 0)
    events: list[Event] = []
    while len(events) < n_ops:
        best: tuple[float, int, tuple[str, int, int]] | None = None
        for r in range(p):  # what can rank r do next, and from when?
            cand = None
            ready = None  # when the next F/B could start; None while its dependency is unknown
            if nxt[r] < len(orders[r]):
                kind, mb, c = orders[r][nxt[r]]
                dep = _dep(kind, mb, c * p + r, n_virtual)
                if dep is None or dep in done:
                    ready = max(free[r], done[dep] if dep else 0.0)
                # zb-h1 keeps 1F1B's memory: no new F while `cap` micro-batches await their W
                blocked = split and kind == "F" and in_flight[r] >= cap
                if ready is not None and ready <= free[r] and not blocked:
                    cand = (free[r], (kind, mb, c))  # ready now: the critical path goes first
            if cand is None and pending_w[r]:
                cand = (free[r], ("W", *pending_w[r][0]))  # would idle: fill the gap with a W
            elif cand is None and ready is not None:
                cand = (ready, orders[r][nxt[r]])  # idle until the dependency arrives
            if cand and (best is None or cand[0] < best[0]):
                best = (cand[0], r, cand[1])
        if best is None:
            raise RuntimeError("pipeline simulation deadlocked: the schedule order is invalid")
        start, r, (kind, mb, c) = best
        end = start + dur[kind]
        done[(kind, mb, c * p + r)] = end
        free[r] = end
        events.append(Event(r, kind, mb, c, start, end))
        if kind == "W":
            pending_w[r].pop(0)
            in_flight[r] -= 1
        else:
            nxt[r] += 1
            if kind == "F":
                in_flight[r] += 1
            elif split:  # the weight gradient of this B is still owed
                pending_w[r].append((mb, c))
    return events


def _finish(name: str, p: int, m: int, v: int, events: list[Event], split: bool) -> Schedule:
    events.sort(key=lambda e: (e.rank, e.start))
    last_kind = "W" if split else "B"
    order, peaks = [], []
    for r in range(p):
        mine = [e for e in events if e.rank == r]
        order.append(
            tuple(f"{e.kind}{e.microbatch}" + (f"c{e.chunk}" if v > 1 else "") for e in mine)
        )
        # +1 at an F's start, -1 at the end of the micro-batch's last backward op;
        # at equal times, frees happen before allocations (sort key False < True).
        marks = [(e.start, True) for e in mine if e.kind == "F"]
        marks += [(e.end, False) for e in mine if e.kind == last_kind]
        level = peak = 0
        for _, is_alloc in sorted(marks):
            level += 1 if is_alloc else -1
            peak = max(peak, level)
        peaks.append(peak)
    makespan = max(e.end for e in events) - min(e.start for e in events)
    return Schedule(name, p, m, v, tuple(events), tuple(order), tuple(peaks), makespan)
