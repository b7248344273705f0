"""Exercise "ddp_bucket_hook" (lab 04): the heart of bucketed DDP, the gradient-ready hook.

The learner writes fn(bucket, param) -> None, which BucketDDP calls from param's
post-accumulate-grad hook, during backward, as soon as param.grad is final:
  1. flatten: copy param.grad into its slot of the bucket's flat buffer (bucket.grad_view(param)),
  2. count it (bucket.num_ready),
  3. when it is the bucket's LAST gradient: divide the buffer by bucket.world_size (gloo has no
     AVG) and launch ONE async all-reduce of the buffer, keeping the handle in bucket.work.
BucketDDP.finish_gradient_synchronization then waits on every handle and copies back (unflatten).

The check trains a ToyMLP whose 6 parameters fall into 3 buckets of 2, for two steps, and
compares every gradient with the single-process gradient of the global batch. A spy around fn
rejects an all-reduce launched before its bucket was complete (a race: the result may even come
out right by luck), and the CommLedger requires exactly one all-reduce per bucket, launched during
backward: 2(N-1)/N x P bytes per rank per step, the same bytes as naive DDP, in 3 messages.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from lab_utils.data import regression_batches, shard_for_rank
from lab_utils.parallel.data_parallel import Bucket, BucketDDP, grad_ready as reference
from lab_utils.exercises._core import Exercise, Verdict, compare_tensors, register
from lab_utils.models import ToyMLP
from lab_utils.reference import default_loss, forward_backward

CAP_BYTES = 2048  # ToyMLP(16, 32, 16, 3 layers): 3 buckets of (weight, bias), last layer first
STEPS, GLOBAL_BATCH = 2, 8


def _all_ranks_agree(ctx, problem: str | None) -> bool:
    """True when no rank found a problem (so every rank returns at the same point)."""
    failed = torch.tensor([float(problem is not None)])
    dist.all_reduce(failed, op=dist.ReduceOp.MAX, group=ctx.group)
    return failed.item() == 0


def check(ctx, fn) -> Verdict:
    from lab_utils.measure import CommLedger

    n = ctx.world_size
    calls: dict[int, int] = {}  # id(bucket) -> gradients handed to fn in this backward
    early: list[str] = []

    def spy(bucket: Bucket, param) -> None:
        was_launched = bucket.work is not None
        calls[id(bucket)] = calls.get(id(bucket), 0) + 1
        fn(bucket, param)
        if bucket.work is not None and not was_launched and calls[id(bucket)] < len(bucket.params):
            early.append(f"a bucket's all-reduce was launched after {calls[id(bucket)]} of its "
                         f"{len(bucket.params)} gradients: the missing slots are still being "
                         "written while the all-reduce reads the buffer (launch on the LAST one)")

    model = ToyMLP(seed=0)
    ref_model = ToyMLP(seed=0)  # the single-process reference, trained by hand with plain SGD
    ddp = BucketDDP(model, bucket_cap_bytes=CAP_BYTES, grad_ready_fn=spy)
    n_buckets = len(ddp.buckets)
    batches = regression_batches(STEPS, GLOBAL_BATCH, seed=3)
    for step, batch in enumerate(batches):
        calls.clear()
        model.zero_grad(set_to_none=True)
        ref_model.zero_grad(set_to_none=True)
        forward_backward(ref_model, batch)
        with CommLedger() as ledger:
            with ledger.phase("backward"):
                x, y = shard_for_rank(batch, ctx.rank, n)
                default_loss(ddp(x), y).backward()
            try:
                with ledger.phase("finish"):
                    ddp.finish_gradient_synchronization()
                problem = None
            except RuntimeError as exc:  # a bucket never launched: say which
                problem = f"step {step}: {exc}"
        problem = early[0] if early else problem
        want = dict(ref_model.named_parameters())
        for name, p in model.named_parameters():
            if problem is None:
                problem = compare_tensors(p.grad, want[name].grad, what=f"gradient of {name}")
                problem = problem and f"step {step}: {problem}"
        if not _all_ranks_agree(ctx, problem):
            return Verdict.fail(problem or "this rank is right, another rank is not")
        launched = ledger.count("all_reduce", phase="backward")
        if launched != n_buckets or ledger.count("all_reduce", phase="finish"):
            return Verdict.fail(
                f"the gradients are right, but {launched} all-reduce(s) ran during backward and "
                f"{ledger.count('all_reduce', phase='finish')} after it; bucketing means ONE "
                f"async all-reduce per bucket ({n_buckets} here), launched inside the hook")
        with torch.no_grad():  # plain SGD on both, so step 2 starts from updated weights
            for p, q in zip(model.parameters(), ref_model.parameters()):
                p -= 0.1 * p.grad
                q -= 0.1 * q.grad
    sent = ledger.bytes_sent("all_reduce", phase="backward")
    grad_bytes = sum(p.numel() * 4 for p in model.parameters())
    return Verdict.ok(f"{STEPS} steps match the single-process gradients on all {n} ranks; "
                      f"{n_buckets} all-reduces per step launched during backward, {sent:.0f} B "
                      f"sent per rank = 2(N-1)/N x {grad_bytes} B of gradients",
                      bytes_sent=sent, grad_bytes=grad_bytes)


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


register(Exercise(
    name="ddp_bucket_hook", lab="04_data_parallel",
    summary="the gradient-ready hook of bucketed DDP: flatten into the bucket, launch when full",
    signature="fn(bucket: lab_utils.parallel.data_parallel.Bucket, param: nn.Parameter) -> None; sets bucket.work",
    check=check, reference=reference,
    wrong={"forgets to divide by world size": wrong_no_divide,
           "launches before the bucket is complete": wrong_launch_on_first_grad,
           "all-reduces a copy, not the bucket's buffer": wrong_reduces_a_copy,
           "one blocking all-reduce per gradient": wrong_one_all_reduce_per_grad},
    world_size=2, timeout_s=60.0,
    hint="bucket.grad_view(param).copy_(param.grad); bucket.num_ready += 1; on the last one: "
         "bucket.buffer.div_(bucket.world_size) and bucket.work = dist.all_reduce(bucket.buffer, "
         "group=bucket.group, async_op=True)"))
