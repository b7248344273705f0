"""Exercise (lab 08): build the process groups of a dp x tp x pp mesh.

The learner writes fn(dp, tp, pp) -> {"tp": group, "dp": group, "pp": group}, called on EVERY
rank of a world of dp * tp * pp ranks: create the groups of all three axes and return the ones
this rank belongs to. The layout is the course's (lab_utils.topology, Megatron's and torchtitan's):

    rank = (pp_index * dp + dp_index) * tp + tp_index        (tp innermost, pp outermost)

so a tp group is tp consecutive ranks (one node: launchers number ranks node by node), a dp
group strides by tp, a pp group by dp * tp.

The check, in two configurations of 8 ranks (dp, tp, pp) = (2, 2, 2) and (2, 4, 1), so that a
hard-coded stride or two swapped outer axes cannot pass by luck:
  1. a dry run with dist.new_group recorded (not executed): new_group is a COLLECTIVE, every
     rank must call it for every group in the same order (unless it passes
     use_local_synchronization=True, where only members call it); ranks that disagree are named
     before any of them could wait forever;
  2. the real run: each returned group must hold exactly the expected ranks
     (dist.get_process_group_ranks), and an all-reduce of the global ranks over it must give
     their sum: the group works, not just its membership.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

from lab_utils.exercises._core import Exercise, Verdict, register
from lab_utils.topology import Topology

AXES = ("pp", "dp", "tp")
CONFIGS = ((2, 2, 2), (2, 4, 1))  # (dp, tp, pp): 8 ranks each


def axis_groups(axis: str, dp: int, tp: int, pp: int) -> list[list[int]]:
    """Every group along ``axis`` (lists of global ranks), with rank = (p * dp + d) * tp + t."""
    rank = lambda p, d, t: (p * dp + d) * tp + t  # noqa: E731
    if axis == "tp":  # consecutive ranks: same p and d
        return [[rank(p, d, t) for t in range(tp)] for p in range(pp) for d in range(dp)]
    if axis == "dp":  # stride tp: same p and t
        return [[rank(p, d, t) for d in range(dp)] for p in range(pp) for t in range(tp)]
    return [
        [rank(p, d, t) for p in range(pp)] for d in range(dp) for t in range(tp)
    ]  # stride dp*tp


def reference(dp: int, tp: int, pp: int) -> dict[str, Any]:
    me, mine = dist.get_rank(), {}
    for axis in AXES:  # the same groups in the same order on EVERY rank
        for ranks in axis_groups(axis, dp, tp, pp):
            group = dist.new_group(ranks)  # a collective: members and non-members call it
            if me in ranks:
                mine[axis] = group
    return mine


# -- known-wrong versions ----------------------------------------------------------------------


def _layout(
    rank: Callable[[int, int, int], int], dp: int, tp: int, pp: int
) -> dict[str, list[list[int]]]:
    """The groups of every axis for a (wrong) layout ``rank(p, d, t)``."""
    return {
        "tp": [[rank(p, d, t) for t in range(tp)] for p in range(pp) for d in range(dp)],
        "dp": [[rank(p, d, t) for d in range(dp)] for p in range(pp) for t in range(tp)],
        "pp": [[rank(p, d, t) for p in range(pp)] for d in range(dp) for t in range(tp)],
    }


def _create(groups: dict[str, list[list[int]]]) -> dict[str, Any]:
    """Every rank creates every group, in the same order; keeps its own of each axis."""
    me, mine = dist.get_rank(), {}
    for axis in AXES:
        for ranks in sorted(groups[axis]):
            g = dist.new_group(ranks)
            if me in ranks:
                mine[axis] = g
    return mine


def wrong_tp_outermost(dp: int, tp: int, pp: int) -> dict[str, Any]:
    """Axes in the opposite order: rank = (t * pp + p) * dp + d (tp strided across nodes)."""
    return _create(_layout(lambda p, d, t: (t * pp + p) * dp + d, dp, tp, pp))


def wrong_members_only(dp: int, tp: int, pp: int) -> dict[str, Any]:
    """Each rank creates only the groups it belongs to."""
    me, mine = dist.get_rank(), {}
    for axis in AXES:
        for ranks in axis_groups(axis, dp, tp, pp):
            if me in ranks:
                mine[axis] = dist.new_group(ranks)
    return mine


def wrong_stride_two(dp: int, tp: int, pp: int) -> dict[str, Any]:
    """The dp stride hard-coded to 2 (right only when tp = 2)."""
    return _create(
        {
            "tp": axis_groups("tp", dp, tp, pp),
            "pp": axis_groups("pp", dp, tp, pp),
            "dp": [
                [p * dp * tp + t + 2 * d for d in range(dp)] for p in range(pp) for t in range(tp)
            ],
        }
    )


def wrong_dp_outside_pp(dp: int, tp: int, pp: int) -> dict[str, Any]:
    """dp and pp swapped: rank = (d * pp + p) * tp + t (pipeline stages within a replica's
    block)."""
    return _create(_layout(lambda p, d, t: (d * pp + p) * tp + t, dp, tp, pp))


# -- the check ---------------------------------------------------------------------------------


class _Recorded:
    """What a dry run's dist.new_group returns: a stand-in that remembers its ranks."""

    def __init__(self, ranks: list[int]):
        self.ranks = list(ranks)

    def __repr__(self) -> str:
        return f"<group {self.ranks} (dry run)>"


def _dry_run(fn: Callable, dp: int, tp: int, pp: int) -> list[tuple[tuple[int, ...], bool]] | None:
    """The new_group calls fn makes, recorded without creating anything; None if fn needs real
    groups to run (then only the real run judges it)."""
    calls: list[tuple[tuple[int, ...], bool]] = []
    real = dist.new_group

    def record(ranks=None, *args: Any, use_local_synchronization: bool = False, **kwargs: Any):
        ranks = list(range(dist.get_world_size())) if ranks is None else sorted(ranks)
        calls.append((tuple(ranks), bool(use_local_synchronization)))
        return _Recorded(ranks)

    dist.new_group = record
    try:
        fn(dp, tp, pp)
    except Exception:  # noqa: BLE001 - e.g. it asked a stand-in for its ranks: judge it for real
        return None
    finally:
        dist.new_group = real
    return calls


def _collective_problem(calls: list) -> str | None:
    """Do all ranks make the same new_group calls in the same order? (same on every rank)"""
    if any(c is None for c in calls):
        return None
    if all(local for rank_calls in calls for _, local in rank_calls):
        return None  # use_local_synchronization=True: members only is allowed
    first = calls[0]
    for r, rank_calls in enumerate(calls[1:], 1):
        if [g for g, _ in rank_calls] != [g for g, _ in first]:
            show = lambda cs: [list(g) for g, _ in cs][:6]  # noqa: E731
            if sorted(g for g, _ in rank_calls) == sorted(g for g, _ in first):
                return (
                    f"every rank created every group, but not in the same order: rank 0 "
                    f"created {show(first)}, rank {r} created {show(rank_calls)}. "
                    "dist.new_group is a COLLECTIVE matched by call order: build the groups "
                    "in one fixed order on every rank (not its own group first)"
                )
            return (
                f"dist.new_group is a COLLECTIVE: every rank must call it for EVERY group, "
                f"in the same order, whether or not it is a member (or pass "
                f"use_local_synchronization=True). Rank 0 created {show(first)}, rank {r} "
                f"created {show(rank_calls)}: with groups built only on their member ranks "
                "the others wait forever in new_group, or pair up with the wrong ranks"
            )
    return None


def _diagnose(axis: str, got: list[int], want: list[int], topo: Topology, rank: int) -> str:
    head = f"rank {rank}'s {axis} group is {got}, expected {want}"
    strides = {b - a for a, b in zip(got, got[1:])}
    want_stride = {"tp": 1, "dp": topo.tp, "pp": topo.dp * topo.tp}[axis]
    if axis == "tp" and strides != {1} and len(got) == len(want):
        return (
            f"{head}: a tp group must be CONSECUTIVE ranks (tp is the innermost axis: rank = "
            f"(pp*{topo.dp} + dp)*{topo.tp} + tp), so that it sits inside one node, where "
            "TP's all-reduces in every layer get NVLink"
        )
    for other in AXES:
        if other != axis and got == topo.axis_ranks(other, rank):
            return f"{head}: that is its {other} group (the two axes are swapped)"
    if len(strides) == 1 and strides != {want_stride}:
        return (
            f"{head}: its members are {strides.pop()} apart, but along {axis} neighbours are "
            f"{want_stride} apart here (the product of the sizes of the axes inside it; "
            f"dp x tp x pp = {topo.dp} x {topo.tp} x {topo.pp}): a hard-coded stride?"
        )
    return f"{head} (layout: rank = (pp*dp_size + dp)*tp_size + tp, tp innermost, pp outermost)"


def _one_config(ctx: Any, fn: Callable, dp: int, tp: int, pp: int) -> str | None:
    topo = Topology(dp=dp, tp=tp, pp=pp)
    calls = [None] * ctx.world_size
    dist.all_gather_object(calls, _dry_run(fn, dp, tp, pp))
    problem = _collective_problem(calls)
    if problem:
        return problem
    groups = fn(dp, tp, pp)
    problem = None
    if not isinstance(groups, dict) or set(groups) != set(AXES):
        problem = (
            "return a dict with exactly the keys 'tp', 'dp', 'pp' (this rank's group on "
            f"each axis), got {groups!r}"
        )
    else:
        for axis in ("tp", "dp", "pp"):
            g = groups[axis]
            try:
                got = sorted(dist.get_process_group_ranks(g))
            except Exception:  # noqa: BLE001 - None, a rank not in it, not a group at all
                problem = (
                    f"rank {ctx.rank}'s {axis} value {g!r} is not a process group it "
                    "belongs to (dist.new_group returns a non-member a placeholder)"
                )
                break
            want = topo.axis_ranks(axis, ctx.rank)
            if got != want:
                problem = _diagnose(axis, got, want, topo, ctx.rank)
                break
    everyone = [None] * ctx.world_size
    dist.all_gather_object(everyone, problem)  # decide together before any group collective
    if any(everyone):
        return problem or next(p for p in everyone if p)
    for axis in ("tp", "dp", "pp"):
        t = torch.tensor([float(ctx.rank)])
        dist.all_reduce(t, group=groups[axis])
        if t.item() != sum(topo.axis_ranks(axis, ctx.rank)):
            return (
                f"an all-reduce over rank {ctx.rank}'s {axis} group summed {t.item():g}, "
                f"not the sum of its members {topo.axis_ranks(axis, ctx.rank)}"
            )
    return None


def check(ctx: Any, fn: Callable) -> Verdict:
    for dp, tp, pp in CONFIGS:
        problem = _one_config(ctx, fn, dp, tp, pp)
        if problem:
            return Verdict.fail(f"dp x tp x pp = {dp} x {tp} x {pp}: {problem}")
    return Verdict.ok(
        "every rank's tp, dp and pp groups hold the right ranks and all-reduce "
        "over them, in " + " and ".join(f"{d}x{t}x{p}" for d, t, p in CONFIGS)
    )


register(
    Exercise(
        name="mesh_groups",
        lab="08_3d_parallelism",
        summary="create the tp, dp and pp process groups of a dp x tp x pp mesh (tp innermost) and "
        "return this rank's",
        signature="fn(dp, tp, pp) -> {'tp': group, 'dp': group, 'pp': group}, called on every rank",
        hint=(
            "which ranks differ from yours only in their tp coordinate, only in dp, only in pp? "
            "Which ranks must call dist.new_group for a group they are not in?"
        ),
        check=check,
        reference=reference,
        wrong={
            "tp outermost instead of innermost": wrong_tp_outermost,
            "groups created only on their member ranks": wrong_members_only,
            "dp stride hard-coded to 2": wrong_stride_two,
            "dp and pp axes swapped": wrong_dp_outside_pp,
        },
        world_size=8,
        timeout_s=90.0,
        solution_helpers=(axis_groups,),
    )
)
