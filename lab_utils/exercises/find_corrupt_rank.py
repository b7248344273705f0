"""Exercise "find_corrupt_rank" (lab 11): name the rank whose hardware silently corrupts data.

Silent data corruption (SDC): a faulty GPU or CPU returns a wrong number without any error. In
data-parallel training the gradient all-reduce then spreads the damage to every replica, so
after it nobody can tell where it came from. The cheap detector: let the ranks of a group
compute something REDUNDANTLY (the same inputs, the same kernels, so healthy ranks agree bit
for bit), exchange a fingerprint of the result, and name the ranks that disagree with the
majority. The learner writes that function:

    fn(output: torch.Tensor, group) -> list[int]     # sorted GLOBAL ranks that disagree

It must hold in several configurations: the whole world with the corrupt rank being rank 0 and
a single flipped low-order bit (a change of 1e-7 relative), a sub-group [1, 2, 3] (rank 0 alone
in a group of its own) with a flipped exponent bit, and a healthy world (no corrupt rank).
"""

from __future__ import annotations

import hashlib
from collections import Counter

import torch
import torch.distributed as dist

from lab_utils.exercises._core import Exercise, Verdict, register


def fingerprint(t: torch.Tensor) -> int:
    """A 60-bit hash of a tensor's bytes: equal iff the tensors are bitwise equal."""
    raw = t.detach().contiguous().view(torch.uint8).numpy().tobytes()
    return int(hashlib.sha256(raw).hexdigest()[:15], 16)


def find_corrupt_ranks(output: torch.Tensor, group) -> list[int]:
    """All-gather one fingerprint per rank (8 bytes each, not the tensor), take the value most
    ranks hold as the truth, and name (in GLOBAL ranks) those that differ from it."""
    size = dist.get_world_size(group)
    prints = torch.zeros(size, dtype=torch.int64)
    dist.all_gather_into_tensor(prints, torch.tensor([fingerprint(output)]), group=group)
    majority, _ = Counter(prints.tolist()).most_common(1)[0]
    return sorted(
        dist.get_global_rank(group, r) if group is not None else r
        for r, p in enumerate(prints.tolist())
        if p != majority
    )


# ----------------------------------------------------------------------------- wrong versions
def _gather_outputs(output, group):
    out = [torch.empty_like(output) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, output.contiguous(), group=group)
    return out


def wrong_compare_with_rank0(output, group) -> list[int]:
    """Takes rank 0 of the group as the truth: wrong whenever rank 0 is the corrupt one."""
    outs = _gather_outputs(output, group)
    return sorted(
        dist.get_global_rank(group, r) for r, o in enumerate(outs) if not torch.equal(o, outs[0])
    )


def wrong_allclose(output, group) -> list[int]:
    """Compares with a tolerance: a flipped low-order bit is 'close', so it goes unnoticed."""
    outs = _gather_outputs(output, group)
    mid = torch.stack(outs).median(dim=0).values
    return sorted(
        dist.get_global_rank(group, r) for r, o in enumerate(outs) if not torch.allclose(o, mid)
    )


def wrong_group_ranks(output, group) -> list[int]:
    """Returns positions inside the group, not global ranks: right only when group = WORLD."""
    prints = torch.zeros(dist.get_world_size(group), dtype=torch.int64)
    dist.all_gather_into_tensor(prints, torch.tensor([fingerprint(output)]), group=group)
    majority, _ = Counter(prints.tolist()).most_common(1)[0]
    return [r for r, p in enumerate(prints.tolist()) if p != majority]


def wrong_ignores_group(output, group) -> list[int]:
    """Gathers over the whole world: the other groups' (different) results join the vote."""
    return find_corrupt_ranks(output, dist.group.WORLD)


# ----------------------------------------------------------------------------- the grader
CASES = (  # (name, groups of global ranks, corrupt global rank or None, bit flipped)
    ("whole world, rank 0 corrupt, a low mantissa bit", ((0, 1, 2, 3),), 0, 2),
    ("sub-groups [0] and [1, 2, 3], rank 2 corrupt, an exponent bit", ((0,), (1, 2, 3)), 2, 30),
    ("whole world, no corrupt rank", ((0, 1, 2, 3),), None, 0),
)


def _redundant_output(
    group_ranks: tuple[int, ...], corrupt: int | None, bit: int, rank: int
) -> torch.Tensor:
    """The same computation on every rank of a group (inputs seeded by the group), then the
    faulty rank's hardware flips one bit of element 5."""
    g = torch.Generator().manual_seed(100 + group_ranks[0])
    a, b = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
    out = (a @ b).flatten()  # (64,)
    if rank == corrupt:
        out.view(torch.int32)[5] ^= 1 << bit
    return out


def check(ctx, fn) -> Verdict:
    """Every case on the same 4 ranks; every rank creates every group (torch requires it), and
    the ranks agree after each case whether to go on, so that they stop at the same case."""
    for name, groups, corrupt, bit in CASES:
        made = [(ranks, dist.new_group(list(ranks))) for ranks in groups]
        ranks, group = next((r, g) for r, g in made if ctx.rank in r)
        out = _redundant_output(ranks, corrupt, bit, ctx.rank)
        got = fn(out.clone(), group)
        expected = [corrupt] if corrupt in ranks else []
        problem = None
        if not isinstance(got, (list, tuple)) or not all(isinstance(r, int) for r in got):
            problem = f"{name}: return a list of ints (global ranks), got {got!r}"
        elif sorted(got) != expected:
            problem = (
                f"{name}: rank {ctx.rank} (group {list(ranks)}) got {sorted(got)}, "
                f"expected {expected}. {_why(sorted(got), expected, ranks)}"
            )
        failed = torch.tensor([float(problem is not None)])
        dist.all_reduce(failed, op=dist.ReduceOp.MAX, group=ctx.group)
        if failed.item():
            return Verdict.fail(problem) if problem else Verdict.ok(f"{name}: right on this rank")
    return Verdict.ok(
        "named the corrupt rank in every case (low bit, exponent bit, sub-group, healthy world)"
    )


def _why(got: list[int], expected: list[int], ranks: tuple[int, ...]) -> str:
    if not got and expected:
        return (
            "Nothing found although one rank differs: a tolerance (allclose, norms) hides a "
            "flipped low-order bit; compare bit for bit."
        )
    if set(got) - set(ranks):
        return "Ranks outside this group were named: the comparison must use `group`, not WORLD."
    if expected and len(got) == len(ranks) - 1:
        return "Every healthy rank was named: the reference value came from the corrupt rank."
    if expected and got and [ranks[i] for i in got if i < len(ranks)] == expected:
        return "These look like positions in the group: return GLOBAL ranks."
    return "Take the value most ranks agree on as the truth."


register(
    Exercise(
        name="find_corrupt_rank",
        lab="11_production",
        summary="name the rank whose hardware silently corrupts a redundant computation",
        signature="fn(output: torch.Tensor, group) -> list[int] (sorted global ranks)",
        check=check,
        reference=find_corrupt_ranks,
        wrong={
            "rank 0 taken as the truth": wrong_compare_with_rank0,
            "compared with a tolerance": wrong_allclose,
            "positions in the group, not global ranks": wrong_group_ranks,
            "gathered over WORLD, not the group": wrong_ignores_group,
        },
        world_size=4,
        timeout_s=30.0,
        hint="healthy ranks agree BIT FOR BIT; what is the cheapest thing to exchange, and who "
        "decides which value is the right one when any rank, rank 0 included, can be faulty?",
        solution_helpers=(fingerprint,),
    )
)
