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
equalise counts across ranks), each step averaging gradients over all ranks.
"""
from __future__ import annotations

import datetime

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils.data import regression_batches, shard_for_rank
from lab_utils.exercises._core import Exercise, Verdict, compare_tensors, register
from lab_utils.models import ToyMLP
from lab_utils.experiments.lab11 import dp_step, param_checksum


def hang_mismatched(ctx, steps: int = 3, fixed: bool = False) -> float:
    """Rank 0 logs the validation loss averaged over ranks, with a collective only IT calls."""
    model = ToyMLP(seed=0)
    for x, y in regression_batches(steps, 4 * ctx.world_size, seed=1):
        dp_step(model, *shard_for_rank((x, y), ctx.rank, ctx.world_size), ctx.group)
    val_set = regression_batches(1, 4 * ctx.world_size, seed=2)[0]
    x, y = shard_for_rank(val_set, ctx.rank, ctx.world_size)
    val = F.mse_loss(model(x), y).detach().reshape(1)
    if fixed:
        dist.all_reduce(val, group=ctx.group)      # every rank joins; only rank 0 prints
    elif ctx.rank == 0:
        dist.all_reduce(val, group=ctx.group)      # BUG: the other ranks never join
    return val.item() / ctx.world_size


def train_even_steps(model, batches, group) -> int:
    """Uneven shards, fixed: agree on the step count FIRST (an all-reduce MIN of the local batch
    counts), then every rank runs exactly that many steps; surplus batches are dropped."""
    n = torch.tensor([len(batches)])
    dist.all_reduce(n, op=dist.ReduceOp.MIN, group=group)
    for x, y in batches[:int(n)]:
        dp_step(model, x, y, group)
    return int(n)


def hang_uneven(ctx, steps: int = 3, extra_rank: int = 3, fix: str = "none",
                monitor_s: float = 2.0) -> int:
    """Rank `extra_rank`'s shard holds one batch more. fix: "none" (it hangs in its extra step's
    all-reduce), "monitored" (a monitored_barrier at the epoch's end names it), "min_steps"."""
    model = ToyMLP(seed=0)
    batches = regression_batches(steps + (ctx.rank == extra_rank), 4, seed=10 + ctx.rank)
    if fix == "min_steps":
        return train_even_steps(model, batches, ctx.group)
    for x, y in batches:
        dp_step(model, x, y, ctx.group)
    if fix == "monitored":  # gloo only (with NCCL, make a gloo group for it); rank 0 waits for all
        dist.monitored_barrier(ctx.group, timeout=datetime.timedelta(seconds=monitor_s),
                               wait_all_ranks=True)
    return len(batches)


def expect_hang(fn, world_size: int, deadline_s: float, *args, expect: list[int] | None = None,
                **kwargs):
    """Run a drill that must hang; return its RankTimeout. The process-group timeout is set far
    beyond the deadline, so the launcher's deadline ends the run and reports each stuck rank's
    stack. On a machine so loaded that ranks which should have finished had not reached the end
    by the deadline (none finished, or the stuck ranks are not `expect`), retry with twice,
    then four times the deadline."""
    from lab_utils.runtime.launch import RankTimeout, run

    for deadline in (deadline_s, 2 * deadline_s, 4 * deadline_s):
        try:
            run(fn, world_size, *args, backend="gloo", timeout_s=deadline, pg_timeout_s=300,
                quiet=True, **kwargs)
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
                p -= 0.1 * p.grad          # no all-reduce: only this replica moves
    return n


def wrong_summed_grads(model, batches, group) -> int:
    """Right step count, but gradients summed instead of averaged (an effective lr x W)."""
    n = torch.tensor([len(batches)])
    dist.all_reduce(n, op=dist.ReduceOp.MIN, group=group)
    for x, y in batches[:int(n)]:
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                dist.all_reduce(p.grad, group=group)
                p -= 0.1 * p.grad
    return int(n)


COUNTS = (4, 3, 5, 3)  # batches per rank: rank 0 does NOT hold the smallest count


def check(ctx, fn) -> Verdict:
    counts = [COUNTS[r % len(COUNTS)] for r in range(ctx.world_size)]
    batches = regression_batches(counts[ctx.rank], 4, seed=20 + ctx.rank)
    mine, ref = ToyMLP(seed=0), ToyMLP(seed=0)
    steps = fn(mine, [(x.clone(), y.clone()) for x, y in batches], ctx.group)
    ref_steps = train_even_steps(ref, batches, ctx.group)
    sums = torch.zeros(ctx.world_size, dtype=torch.int64)
    dist.all_gather_into_tensor(sums, torch.tensor([param_checksum(mine)]), group=ctx.group)
    if steps != ref_steps:
        return Verdict.fail(f"returned {steps} steps with {counts[ctx.rank]} local batches; every "
                            f"rank should run min{tuple(counts)} = {ref_steps}")
    if len(set(sums.tolist())) > 1:
        return Verdict.fail("the replicas' weights differ after training: some update was not "
                            "averaged over all ranks (a step taken alone?)")
    flat = lambda m: torch.cat([p.detach().flatten() for p in m.parameters()])  # noqa: E731
    problem = compare_tensors(flat(mine), flat(ref), what="trained weights")
    return Verdict.fail(problem) if problem else Verdict.ok(
        f"every rank ran {steps} steps (batches per rank {tuple(counts)}) and the replicas agree")


register(Exercise(
    name="find_the_hang", lab="11_production",
    summary="data-parallel training on uneven per-rank batch lists, without a hang",
    signature="fn(model, batches: list[(x, y)], group) -> int (steps taken)",
    check=check, reference=train_even_steps,
    wrong={"surplus batches stepped locally": wrong_local_surplus,
           "gradients summed, not averaged": wrong_summed_grads},
    world_size=4, timeout_s=30.0,
    hint="agree on the number of steps with one collective BEFORE the loop; every rank must "
         "call the same all-reduces, and lab_utils.experiments.lab11.dp_step averages them for you",
    solution_helpers=(dp_step,)))
