"""Hang drills and the exercise "find_the_hang" (lab 11).

Two classic hangs, each a worker for lab_utils.run:
  * hang_mismatched: a collective inside `if rank == 0:` (rank 0 averages the validation loss
    for its log line; the other ranks never join that all-reduce);
  * hang_uneven: one rank's data shard holds one batch more, so it enters one more gradient
    all-reduce than the others.
expect_hang runs a drill that must hang and returns the launcher's RankTimeout.

The exercise: train data-parallel on per-rank batch lists of DIFFERENT lengths without hanging:
every rank must run the same number of steps, the smallest count (the surplus is dropped, as
DistributedSampler(drop_last=True) would for a map-style dataset; a DataLoader's drop_last does not
equalise counts across ranks), each step averaging gradients over all ranks of the group. Checked
on the whole world (batches per rank 4, 3, 5, 3: rank 0 does not hold the smallest count) and on
two data-parallel groups [0, 2] and [1, 3] at once (4, 5 and 3, 6: the groups' minimums differ
from the world's, so an agreement on the default group runs the wrong number of steps).
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils.data import regression_batches, shard_for_rank
from lab_utils.exercises._core import Exercise, Verdict, compare_tensors, first_problem, register
from lab_utils.experiments.lab11.faults import dp_step, param_checksum
from lab_utils.models import ToyMLP


def hang_mismatched(ctx, steps: int = 3, fixed: bool = False) -> float:
    """Rank 0 logs the validation loss averaged over ranks, with a collective only IT calls."""
    model = ToyMLP(seed=0)
    for x, y in regression_batches(steps, 4 * ctx.world_size, seed=1):
        dp_step(model, *shard_for_rank((x, y), ctx.rank, ctx.world_size), ctx.group)
    val_set = regression_batches(1, 4 * ctx.world_size, seed=2)[0]
    x, y = shard_for_rank(val_set, ctx.rank, ctx.world_size)
    val = F.mse_loss(model(x), y).detach().reshape(1)
    if fixed:
        dist.all_reduce(val, group=ctx.group)  # every rank joins; only rank 0 prints
    elif ctx.rank == 0:
        dist.all_reduce(val, group=ctx.group)  # BUG: the other ranks never join
    return val.item() / ctx.world_size


def train_even_steps(model, batches, group) -> int:
    """Uneven shards, fixed: agree on the step count FIRST (an all-reduce MIN of the local batch
    counts), then every rank runs exactly that many steps; surplus batches are dropped."""
    n = torch.tensor([len(batches)])
    dist.all_reduce(n, op=dist.ReduceOp.MIN, group=group)
    for x, y in batches[: int(n)]:
        dp_step(model, x, y, group)
    return int(n)


def hang_uneven(
    ctx, steps: int = 3, extra_rank: int = 3, fix: str = "none", monitor_s: float = 2.0
) -> int:
    """Rank `extra_rank`'s shard holds one batch more. fix: "none" (it hangs in its extra step's
    all-reduce), "monitored" (a monitored_barrier at the epoch's end names it), "min_steps"."""
    model = ToyMLP(seed=0)
    batches = regression_batches(steps + (ctx.rank == extra_rank), 4, seed=10 + ctx.rank)
    if fix == "min_steps":
        return train_even_steps(model, batches, ctx.group)
    for x, y in batches:
        dp_step(model, x, y, ctx.group)
    if fix == "monitored":  # gloo only (with NCCL, make a gloo group for it); rank 0 waits for all
        dist.monitored_barrier(
            ctx.group, timeout=datetime.timedelta(seconds=monitor_s), wait_all_ranks=True
        )
    return len(batches)


def expect_hang(
    fn, world_size: int, deadline_s: float, *args, expect: list[int] | None = None, **kwargs
):
    """Run a drill that must hang; return its RankTimeout. The process-group timeout is set far
    beyond the deadline, so the launcher's deadline ends the run and reports each stuck rank's
    stack. On a machine so loaded that ranks which should have finished had not reached the end
    by the deadline (none finished, or the stuck ranks are not `expect`), retry with twice,
    then four times the deadline."""
    from lab_utils.runtime.launch import RankTimeout, run

    for deadline in (deadline_s, 2 * deadline_s, 4 * deadline_s):
        try:
            run(
                fn,
                world_size,
                *args,
                backend="gloo",
                timeout_s=deadline,
                pg_timeout_s=300,
                quiet=True,
                **kwargs,
            )
        except RankTimeout as exc:
            stuck = sorted(exc.unfinished)
            done = stuck == sorted(expect) if expect is not None else len(stuck) < world_size
            if done or deadline == 4 * deadline_s:
                return exc
            continue
        raise AssertionError(f"{getattr(fn, '__name__', fn)} was expected to hang but finished")


# ----------------------------------------------------------------------------- the exercise
def wrong_local_surplus(model, batches, group) -> int:
    """Agrees on the count, then 'uses' the surplus batches with local steps: replicas diverge."""
    n = train_even_steps(model, batches, group)
    for x, y in batches[n:]:
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad  # no all-reduce: only this replica moves
    return n


def wrong_summed_grads(model, batches, group) -> int:
    """Right step count, but gradients summed instead of averaged (an effective lr x W)."""
    n = torch.tensor([len(batches)])
    dist.all_reduce(n, op=dist.ReduceOp.MIN, group=group)
    for x, y in batches[: int(n)]:
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                dist.all_reduce(p.grad, group=group)
                p -= 0.1 * p.grad
    return int(n)


def wrong_max_steps_wrapping(model, batches, group) -> int:
    """Agrees on the LARGEST count and reuses batches on the ranks that run out: no hang, but
    those ranks train on some samples twice (and every rank takes more steps than it should)."""
    n = torch.tensor([len(batches)])
    dist.all_reduce(n, op=dist.ReduceOp.MAX, group=group)
    for i in range(int(n)):
        dp_step(model, *batches[i % len(batches)], group)
    return int(n)


def wrong_count_on_default_group(model, batches, group) -> int:
    """Agrees on the count over the default group (every rank of the job), not over `group`."""
    n = torch.tensor([len(batches)])
    dist.all_reduce(n, op=dist.ReduceOp.MIN)
    for x, y in batches[: int(n)]:
        dp_step(model, x, y, group)
    return int(n)


# batches per GLOBAL rank, and the data-parallel groups, for each configuration
CONFIGS = (
    ("the whole world", (4, 3, 5, 3), ((0, 1, 2, 3),)),  # rank 0 does NOT hold the min
    ("groups [0, 2] and [1, 3]", (4, 3, 5, 6), ((0, 2), (1, 3))),
)


def _in_group(ctx, fn, group, ranks: tuple[int, ...], counts: tuple[int, ...]) -> str | None:
    me = ctx.rank
    batches = regression_batches(counts[me], 4, seed=20 + me)
    mine, ref = ToyMLP(seed=0), ToyMLP(seed=0)
    steps = fn(mine, [(x.clone(), y.clone()) for x, y in batches], group)
    ref_steps = train_even_steps(ref, batches, group)
    sums = torch.zeros(len(ranks), dtype=torch.int64)
    dist.all_gather_into_tensor(sums, torch.tensor([param_checksum(mine)]), group=group)
    mine_counts = tuple(counts[r] for r in ranks)
    if steps != ref_steps:
        why = ""
        if steps == min(counts) and len(ranks) < len(counts):
            why = (
                f" -- {steps} is the minimum over the WHOLE world {counts}: the count was "
                "agreed on the default group; pass group=group"
            )
        elif steps == max(mine_counts):
            why = (
                " -- that is the LARGEST count: the ranks with fewer batches would have to "
                "invent steps (reusing batches trains on some samples twice)"
            )
        return (
            f"returned {steps} steps with {counts[me]} local batches; every rank of group "
            f"{list(ranks)} should run min{mine_counts} = {ref_steps}{why}"
        )
    if len(set(sums.tolist())) > 1:
        return (
            "the replicas' weights differ after training: some update was not averaged over "
            "all ranks of the group (a step taken alone?)"
        )
    flat = lambda m: torch.cat([p.detach().flatten() for p in m.parameters()])  # noqa: E731
    problem = compare_tensors(flat(mine), flat(ref), what="trained weights")
    return problem and (
        f"the step count is right and the replicas agree, but {problem}: each "
        "step must AVERAGE the gradients over the group (a sum makes every "
        "update group-size times too big); dp_step does that for you"
    )


def check(ctx, fn) -> Verdict:
    for name, counts, partition in CONFIGS:
        groups = [(ranks, dist.new_group(list(ranks))) for ranks in partition]  # every rank
        ranks, group = next((r, g) for r, g in groups if ctx.rank in r)
        group = ctx.group if len(partition) == 1 else group
        problem = _in_group(ctx, fn, group, ranks, counts)
        found = first_problem(problem, ctx.group)  # every rank learns it
        if found:
            return Verdict.fail(f"{name}, rank {found[0]}: {found[1]}")
    return Verdict.ok(
        "every rank ran its group's minimum number of steps (batches per rank "
        + " and ".join(str(c) for _, c, _ in CONFIGS)
        + ", on the whole world and on groups [0, 2] / [1, 3]) and the replicas "
        "agree"
    )


_SYMPTOMS = (
    "connection closed",
    "connection reset",
    "died without",
    "timed out",
    "stuck",
    "invalid tensor size",
    "exited without reporting",
    "broken pipe",
)


def explain_failure(exc: Exception) -> str | None:
    """A launch that failed in collectives is this exercise's hang: ranks with different batch
    counts ran different numbers of all-reduces. Said in those words whatever the transport
    made of it (gloo closes the connection or aborts a rank; NCCL waits until its timeout)."""
    from lab_utils.runtime.results import RankTimeout

    text = str(exc).lower()
    if not isinstance(exc, RankTimeout) and not any(s in text for s in _SYMPTOMS):
        return None
    counts = CONFIGS[0][1]
    few = min(counts)
    short = ", ".join(str(r) for r, c in enumerate(counts) if c == few)
    more = ", ".join(f"{r} ({c})" for r, c in enumerate(counts) if c > few)
    first = str(exc).strip().splitlines()[0][:200]
    return (
        f"a hang: your ranks ran different numbers of collectives. Ranks 0-3 hold {counts} "
        f"batches; looping over its own batches, ranks {short} ran out after {few} steps "
        f"and went on to the next collective, while ranks {more} entered step {few + 1}'s gradient "
        f"all-reduce and "
        f"waited there for ranks {short}, who never joined it. Agree on the step count over "
        "the group (one all-reduce MIN) BEFORE the loop. "
        f"(The transport reported it as: {first})"
    )


register(
    Exercise(
        name="find_the_hang",
        lab="11_production",
        summary="data-parallel training on uneven per-rank batch lists, without a hang",
        signature="fn(model, batches: list[(x, y)], group) -> int (steps taken)",
        check=check,
        reference=train_even_steps,
        wrong={
            "surplus batches stepped locally": wrong_local_surplus,
            "gradients summed, not averaged": wrong_summed_grads,
            "largest count, batches reused": wrong_max_steps_wrapping,
            "step count agreed on the default group": wrong_count_on_default_group,
        },
        world_size=4,
        timeout_s=20.0,  # a hang (this exercise's mistake) is reported after 15 s
        hint="agree on the number of steps with one collective BEFORE the loop; every rank must "
        "call the same all-reduces, and dp_step (experiments/lab11/faults.py) averages them",
        solution_helpers=(dp_step,),
        explain_failure=explain_failure,
    )
)
