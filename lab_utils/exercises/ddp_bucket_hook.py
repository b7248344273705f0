"""Exercise "ddp_bucket_hook" (lab 04): the heart of bucketed DDP, the gradient-ready hook.

The learner writes fn(bucket, param) -> None, which BucketDDP calls from param's
post-accumulate-grad hook, during backward, as soon as param.grad is final:
  1. flatten: copy param.grad into its slot of the bucket's flat buffer (bucket.grad_view(param)),
  2. count it (bucket.num_ready),
  3. when it is the bucket's LAST gradient: divide the buffer by bucket.world_size (or reduce
     with ReduceOp.AVG, which gloo has too) and launch ONE async all-reduce of the buffer, keeping
     the handle in bucket.work.
BucketDDP.finish_gradient_synchronization then waits on every handle and copies back (unflatten).

The check trains a ToyMLP for two steps in two configurations that separate right from
accidentally right: the whole world of 4 ranks with 3 buckets of 2 parameters each, and two
data-parallel groups [0, 2] and [1, 3] (not WORLD; each group trains on its own data) whose
buckets hold 4 and 2 parameters (a hard-coded "launch at the 2nd gradient" or a divide by the
world's size fails there). It compares every gradient with the single-process gradient of the
group's global batch. A spy around fn rejects an all-reduce launched before its bucket was
complete (a race: the result may even come out right by luck) and a hook that WAITS for its
all-reduce (a blocking call, or .wait() inside the hook: right numbers, but backward no longer
overlaps the communication, which is the point of bucketing); the CommLedger requires exactly
one all-reduce per bucket, launched during backward: 2(N-1)/N x P bytes per rank per step, the
same bytes as naive DDP.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from lab_utils.data import regression_batches, shard_for_rank
from lab_utils.exercises._core import Exercise, Verdict, compare_tensors, first_problem, register
from lab_utils.models import ToyMLP
from lab_utils.parallel.data_parallel import Bucket, BucketDDP
from lab_utils.parallel.data_parallel import grad_ready as reference
from lab_utils.reference import default_loss, forward_backward

# ToyMLP(16, 32, 16, 3 layers), last layer first: a cap of 2048 B gives 3 buckets of (bias,
# weight); 6000 B gives (b3, w3, b2, w2) and (b1, w1)
CONFIGS = (
    ("the whole world, buckets of 2 parameters", ((0, 1, 2, 3),), 2048),
    ("groups [0, 2] and [1, 3], buckets of 4 and 2 parameters", ((0, 2), (1, 3)), 6000),
)
STEPS, GLOBAL_BATCH = 2, 8


def _all_ranks_agree(ctx, problem: str | None) -> bool:
    """True when no rank found a problem (so every rank returns at the same point)."""
    failed = torch.tensor([float(problem is not None)])
    dist.all_reduce(failed, op=dist.ReduceOp.MAX, group=ctx.group)
    return failed.item() == 0


class _WaitSpy:
    """While the learner's hook runs: dist.all_reduce records blocking calls, and the Work it
    returns records a .wait() (both mean the hook waits for its own communication)."""

    def __init__(self) -> None:
        self.waited = False

    def __enter__(self) -> "_WaitSpy":
        self.real = dist.all_reduce
        spy = self

        class _Work:
            def __init__(self, work):
                self._work = work

            def wait(self, *a, **k):
                spy.waited = True
                return self._work.wait(*a, **k)

            def __getattr__(self, name):
                return getattr(self._work, name)

        def all_reduce(tensor, *args, **kwargs):
            async_op = kwargs.get("async_op", args[2] if len(args) > 2 else False)
            if not async_op:
                spy.waited = True
            work = self.real(tensor, *args, **kwargs)
            return _Work(work) if work is not None else None

        dist.all_reduce = all_reduce
        return self

    def __exit__(self, *exc) -> None:
        dist.all_reduce = self.real


def _factor(got, want, n: int, world: int) -> str | None:
    """Name a gradient that is a whole factor off: summed, or divided by the world's size."""
    if got is None or got.shape != want.shape or not want.norm():
        return None
    ratio = (got.norm() / want.norm()).item()
    if n > 1 and torch.allclose(got, n * want, rtol=1e-4, atol=1e-7):
        return (
            f"the gradients are {n} x the average: they were SUMMED over the {n} ranks; "
            "divide bucket.buffer by bucket.world_size before the all-reduce (it sums)"
        )
    if world != n and torch.allclose(got, n / world * want, rtol=1e-4, atol=1e-7):
        return (
            f"the gradients are {ratio:.2g} x the average: divided by {world}, the size of "
            f"the WHOLE world, but this group has {n} ranks (bucket.world_size)"
        )
    return None


def _holds_local_grads(model, batch, rank: int, n: int) -> bool:
    """True when model's gradients are those of this rank's shard alone (never reduced)."""
    local = ToyMLP(seed=0)
    x, y = shard_for_rank(batch, rank, n)
    default_loss(local(x), y).backward()
    return n > 1 and all(
        p.grad is not None and torch.allclose(p.grad, q.grad, atol=1e-7)
        for p, q in zip(model.parameters(), local.parameters())
    )


def _in_group(ctx, fn, group, n: int, rank: int, seed: int, cap: int) -> tuple[str | None, str]:
    """One configuration on this rank's group: a problem (or None), and the summary."""
    from lab_utils.measure import CommLedger

    calls: dict[int, int] = {}  # id(bucket) -> gradients handed to fn in this backward
    early: list[str] = []
    now = {"step": 0}

    def spy(bucket: Bucket, param) -> None:
        was_launched = bucket.work is not None
        calls[id(bucket)] = calls.get(id(bucket), 0) + 1
        with _WaitSpy() as waits:
            fn(bucket, param)
        if bucket.work is not None and not was_launched and calls[id(bucket)] < len(bucket.params):
            early.append(
                f"a bucket's all-reduce was launched after {calls[id(bucket)]} of its "
                f"{len(bucket.params)} gradients: the missing slots are still being "
                "written while the all-reduce reads the buffer (launch on the LAST one)"
                if now["step"] == 0
                else f"step {now['step']}: a bucket launched its all-reduce after "
                f"{calls[id(bucket)]} of its {len(bucket.params)} gradients, though step "
                "0 launched every bucket on its last one: the readiness set (or count) "
                "is never cleared between steps, so it is already full; clear it when "
                "the bucket launches"
            )
        if waits.waited:
            early.append(
                "the hook WAITED for its all-reduce (a blocking call, or .wait() inside "
                "the hook): the numbers come out right, but backward stops until the "
                "bucket is reduced, so nothing overlaps. Launch with async_op=True, keep "
                "the handle in bucket.work, and let finish_gradient_synchronization wait"
            )

    model = ToyMLP(seed=0)
    ref_model = ToyMLP(seed=0)  # the single-process reference, trained by hand with plain SGD
    ddp = BucketDDP(model, bucket_cap_bytes=cap, group=group, grad_ready_fn=spy)
    n_buckets = len(ddp.buckets)
    sizes = [len(b.params) for b in ddp.buckets]
    batches = regression_batches(STEPS, GLOBAL_BATCH, seed=seed)
    problem = None
    for step, batch in enumerate(batches):
        calls.clear()
        now["step"] = step
        model.zero_grad(set_to_none=True)
        ref_model.zero_grad(set_to_none=True)
        forward_backward(ref_model, batch)
        with CommLedger() as ledger:
            with ledger.phase("backward"):
                x, y = shard_for_rank(batch, rank, n)
                default_loss(ddp(x), y).backward()
            try:
                with ledger.phase("finish"):
                    ddp.finish_gradient_synchronization()
            except RuntimeError as exc:  # a bucket never launched: say which
                problem = problem or f"step {step}: {exc}"
        problem = early[0] if early else problem
        want = dict(ref_model.named_parameters())
        if problem is None and step == 0 and _holds_local_grads(model, batch, rank, n):
            problem = (
                "every rank still holds its LOCAL gradient: the all-reduce ran on a copy "
                "(bucket.buffer / n makes a new tensor), so bucket.buffer was never "
                "reduced; divide and all-reduce bucket.buffer itself, in place"
            )
        for name, p in model.named_parameters():
            if problem is None:
                problem = compare_tensors(p.grad, want[name].grad, what=f"gradient of {name}")
                named = problem and _factor(p.grad, want[name].grad, n, ctx.world_size)
                problem = problem and f"step {step}: {named or problem}"
        if not _all_ranks_agree(ctx, problem):  # over the WORLD: every rank stops together
            return problem, ""
        launched = ledger.count("all_reduce", phase="backward")
        if launched != n_buckets or ledger.count("all_reduce", phase="finish"):
            return (
                f"the gradients are right, but {launched} all-reduce(s) ran during backward "
                f"and {ledger.count('all_reduce', phase='finish')} after it; bucketing means "
                f"ONE async all-reduce per bucket ({n_buckets} here), launched inside the "
                "hook"
            ), ""
        with torch.no_grad():  # plain SGD on both, so step 2 starts from updated weights
            for p, q in zip(model.parameters(), ref_model.parameters()):
                p -= 0.1 * p.grad
                q -= 0.1 * q.grad
    sent = ledger.bytes_sent("all_reduce", phase="backward")
    grad_bytes = sum(p.numel() * 4 for p in model.parameters())
    return None, (
        f"{n} ranks, buckets of {sizes} parameters: {n_buckets} all-reduces per step "
        f"launched during backward, {sent:.0f} B sent per rank = 2(N-1)/N x "
        f"{grad_bytes} B of gradients"
    )


def check(ctx, fn) -> Verdict:
    me, done = ctx.rank, []
    for k, (name, partition, cap) in enumerate(CONFIGS):
        groups = [(ranks, dist.new_group(list(ranks))) for ranks in partition]  # every rank
        ranks, group = next((r, g) for r, g in groups if me in r)
        group = ctx.group if len(partition) == 1 else group
        seed = 3 + 10 * partition.index(ranks)  # each group trains on its own data
        problem, summary = _in_group(ctx, fn, group, len(ranks), ranks.index(me), seed, cap)
        found = first_problem(problem, ctx.group)  # every rank stops, with the first cause
        problem = found and (problem if found[0] == ctx.rank else f"rank {found[0]}: {found[1]}")
        if problem:
            note = (
                ""
                if k == 0
                else " (the whole world passed: on a sub-group use "
                "bucket.group and bucket.world_size, and launch on the bucket's LAST "
                "gradient, len(bucket.params), whatever the bucket size)"
            )
            return Verdict.fail(f"{name}: {problem}{note}")
        done.append(summary)
    return Verdict.ok(
        f"{STEPS} steps match the single-process gradients in both "
        "configurations; " + "; ".join(done)
    )


# ---- known-wrong answers (tests/test_exercises.py requires every one rejected) ---------------
def wrong_no_divide(bucket, param):
    bucket.grad_view(param).copy_(param.grad)
    bucket.num_ready += 1
    if bucket.num_ready == len(bucket.params):
        bucket.work = dist.all_reduce(bucket.buffer, group=bucket.group, async_op=True)


def wrong_launch_on_first_grad(bucket, param):
    bucket.grad_view(param).copy_(param.grad)
    bucket.num_ready += 1
    if bucket.num_ready == 1:  # "as soon as possible" - but the bucket is not full yet
        bucket.buffer.div_(bucket.world_size)
        bucket.work = dist.all_reduce(bucket.buffer, group=bucket.group, async_op=True)


def wrong_reduces_a_copy(bucket, param):
    bucket.grad_view(param).copy_(param.grad)
    bucket.num_ready += 1
    if bucket.num_ready == len(bucket.params):
        flat = bucket.buffer / bucket.world_size  # a NEW tensor: the sum lands there, not in buffer
        bucket.work = dist.all_reduce(flat, group=bucket.group, async_op=True)


def wrong_one_all_reduce_per_grad(bucket, param):
    bucket.grad_view(param).copy_(param.grad / bucket.world_size)
    dist.all_reduce(bucket.grad_view(param), group=bucket.group)  # right numbers, no bucketing
    bucket.num_ready += 1
    if bucket.num_ready == len(bucket.params):
        bucket.work = dist.barrier(group=bucket.group, async_op=True)


def wrong_waits_in_hook(bucket, param):
    bucket.grad_view(param).copy_(param.grad)
    bucket.num_ready += 1
    if bucket.num_ready == len(bucket.params):
        bucket.buffer.div_(bucket.world_size)
        bucket.work = dist.all_reduce(bucket.buffer, group=bucket.group, async_op=True)
        bucket.work.wait()  # "to be safe": backward now stops here until the bucket is reduced


def wrong_launch_at_two(bucket, param):
    bucket.grad_view(param).copy_(param.grad)
    bucket.num_ready += 1
    if bucket.num_ready == 2:  # the diagram's (weight, bias) buckets, hard-coded
        bucket.buffer.div_(bucket.world_size)
        bucket.work = dist.all_reduce(bucket.buffer, group=bucket.group, async_op=True)


def wrong_divides_by_world_size(bucket, param):
    bucket.grad_view(param).copy_(param.grad)
    bucket.num_ready += 1
    if bucket.num_ready == len(bucket.params):
        bucket.buffer.div_(dist.get_world_size())  # the WORLD's size, not the bucket's group's
        bucket.work = dist.all_reduce(bucket.buffer, group=bucket.group, async_op=True)


register(
    Exercise(
        name="ddp_bucket_hook",
        lab="04_data_parallel",
        summary=(
            "the gradient-ready hook of bucketed DDP: flatten into the bucket, launch when full"
        ),
        signature=(
            "fn(bucket: lab_utils.parallel.data_parallel.Bucket, param: nn.Parameter) -> "
            "None;"
            " sets bucket.work"
        ),
        check=check,
        reference=reference,
        wrong={
            "forgets to divide by world size": wrong_no_divide,
            "launches before the bucket is complete": wrong_launch_on_first_grad,
            "all-reduces a copy, not the bucket's buffer": wrong_reduces_a_copy,
            "one blocking all-reduce per gradient": wrong_one_all_reduce_per_grad,
            "waits for its all-reduce inside the hook (no overlap)": wrong_waits_in_hook,
            "launches at the 2nd gradient (bucket size hard-coded)": wrong_launch_at_two,
            "divides by the world size, not the group's": wrong_divides_by_world_size,
        },
        world_size=4,
        timeout_s=60.0,
        hint=(
            "where does this gradient's slot in the flat buffer live (bucket.grad_view)? How do "
            "you know it is the bucket's LAST gradient, whatever the bucket's size? What turns "
            "the sum into a mean on the bucket's group, and which argument keeps backward from "
            "waiting?"
        ),
    )
)
