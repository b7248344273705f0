"""Data parallelism from scratch (lab 04): NaiveDDP, then BucketDDP, then torch's DDP.

Every rank holds a full replica of the model and runs forward/backward on ITS shard of the
global batch; averaging the gradients over ranks gives exactly the gradient of the mean loss over
the global batch (equal shards), so every replica takes the same optimizer step.

Communication, N ranks, P = bytes of the trainable gradients, B = bytes of the buffers:
  construction : broadcast of every parameter and buffer from rank 0        ~ (params + B) once
  each forward : broadcast of the buffers from rank 0 (broadcast_buffers)   ~ B
  each step    : all-reduce of every gradient; a ring sends 2(N-1)/N * P bytes per rank
NaiveDDP sends P as one blocking all-reduce PER PARAMETER after backward: nothing overlaps and the
latency term is n_params * 2(N-1) * alpha. BucketDDP sends the same P bytes as one async
all-reduce per BUCKET (~bucket_cap_bytes), launched during backward as soon as a bucket's last
gradient is ready, so communication overlaps the rest of backward (Li et al. 2020, PyTorch DDP).

Averaging convention (one, for both classes): divide each gradient by N, then all-reduce with
SUM. torch DDP's reducer does the same (dividing BEFORE summing keeps fp16/bf16 sums in range).
ReduceOp.AVG gives the same numbers in one call and works on NCCL and, in torch 2.13, on gloo
too (zero.py uses it); what gloo lacks is PREMUL_SUM. Dividing by a power of two is exact, so on
2 or 4 ranks pre-dividing and AVG agree bit for bit.

Training loop (both classes, and the same shape as with torch DDP):
    out = ddp(x); loss_fn(out, y).backward()
    ddp.finish_gradient_synchronization()      # naive: all-reduce now; bucket: wait + copy back
    optimizer.step()
Gradient accumulation: run the first K-1 micro-batches inside `with ddp.no_sync():` (no
communication, .grad accumulates locally); the next synchronised backward reduces the sum.

Teardown: these classes (and zero.ZeroOptimizer, fsdp.FSDP) keep ``group=None`` as None and let
each collective resolve the default group; they never hold the default ProcessGroup object. Every
async all-reduce is waited for in finish_gradient_synchronization and its handle dropped. The
hooks that launch collectives during backward run under backward_tls.without_autograd_context:
without it, a rank under a plain ``torch.multiprocessing.spawn`` harness could abort at exit
("terminate called without an active exception"; the cause is in docs/teardown.md, and
tests/test_teardown.py runs that harness).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.parallel.backward_tls import without_autograd_context


def broadcast_from_rank0(tensors: list[torch.Tensor], group: Any = None) -> None:
    """Overwrite each tensor with group rank 0's copy: one dist.broadcast per tensor (~D bytes)."""
    for t in tensors:
        dist.broadcast(t.detach(), group=group, group_src=0)


class _DataParallelBase(nn.Module):
    """What both from-scratch DDPs share: replicas start equal, buffers follow rank 0, no_sync."""

    def __init__(self, module: nn.Module, group: Any = None, broadcast_buffers: bool = True):
        super().__init__()
        self.module = module
        self.group = group  # None: the default group (module docstring: teardown)
        self.world_size = dist.get_world_size(self.group)
        self.broadcast_buffers = broadcast_buffers
        self.require_grad_sync = True  # False inside no_sync()
        self._sync_pending = False  # did the last forward promise a synchronised backward?
        # module.parameters() yields a shared (tied) Parameter ONCE: it has one .grad, which
        # autograd already sums over its uses, so it is reduced once. Frozen ones need no grad.
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.names = {id(p): n for n, p in module.named_parameters()}
        # Different seeds or a rank that loaded another checkpoint would train different models.
        broadcast_from_rank0(list(module.parameters()) + list(module.buffers()), self.group)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.broadcast_buffers:
            # BatchNorm's running stats are updated from each rank's own shard, so replicas drift;
            # like torch DDP, every forward starts from rank 0's buffers.
            broadcast_from_rank0(list(self.module.buffers()), self.group)
        # Decided at forward time, as in torch DDP: a forward run under no_sync() gives a
        # backward that does not communicate, wherever that backward is called.
        self._sync_pending = self.require_grad_sync and torch.is_grad_enabled()
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Forwards/backwards in here do not communicate; gradients accumulate in .grad."""
        previous, self.require_grad_sync = self.require_grad_sync, False
        try:
            yield
        finally:
            self.require_grad_sync = previous


def average_gradients(module: nn.Module, group: Any = None) -> None:
    """Naive DDP's whole communication, called after backward: every gradient becomes its
    average over the ranks of ``group``, in place, with one blocking all-reduce per parameter
    (2(N-1)/N * P bytes per rank in total, n_params latency terms, nothing overlapped).

    module.parameters() yields a tied Parameter once (one .grad, already summed over its uses).
    A parameter without a gradient (frozen, or unused in this forward) is None on every rank of
    the group alike (same model, same graph), so every rank skips it and the calls still match.
    """
    n = dist.get_world_size(group)
    for p in module.parameters():
        if p.grad is None:
            continue
        p.grad.div_(n)  # pre-divide, then sum = the average (module docstring)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, group=group)


class NaiveDDP(_DataParallelBase):
    """After backward, average_gradients: one blocking all-reduce per parameter gradient.

    Cost per step: n_params all-reduces, 2(N-1)/N * P bytes per rank in total, none of it
    overlapped with computation (picotron's DataParallelNaive, minus the per-grad hooks).
    """

    def finish_gradient_synchronization(self) -> None:
        if not self._sync_pending:
            return  # the last forward ran under no_sync(): keep accumulating locally
        average_gradients(self.module, self.group)
        self._sync_pending = False


@dataclass(eq=False)
class Bucket:
    """A group of parameters whose gradients travel together in ONE flat all-reduce.

    buffer: (sum of the params' numel,) flat tensor; param i's gradient lives in
    buffer[offsets[i] : offsets[i] + params[i].numel()] while the bucket is in flight.
    """

    params: list[nn.Parameter]
    buffer: torch.Tensor
    offsets: list[int]
    group: Any
    world_size: int
    num_ready: int = 0  # gradients copied in during this backward
    work: Any = None  # the async all-reduce's handle (dist.Work) once launched
    _views: dict[int, torch.Tensor] = field(default_factory=dict)  # id(param) -> its slot

    def __post_init__(self) -> None:
        # Views made once: slicing in every hook call is measurable Python overhead per step.
        self._views = {
            id(p): self.buffer[o : o + p.numel()].view_as(p)
            for p, o in zip(self.params, self.offsets)
        }

    def grad_view(self, param: nn.Parameter) -> torch.Tensor:
        """The slice of `buffer` that holds `param`'s gradient, shaped like `param` (a view)."""
        return self._views[id(param)]


def grad_ready(bucket: Bucket, param: nn.Parameter) -> None:
    """Called once per backward when param.grad is final: flatten it into its bucket and, when it
    is the bucket's LAST gradient, launch the bucket's all-reduce without waiting for it."""
    bucket.grad_view(param).copy_(param.grad)  # flatten: this gradient's slot in the flat buffer
    bucket.num_ready += 1
    if bucket.num_ready == len(bucket.params):  # launching earlier would send missing slots
        bucket.buffer.div_(bucket.world_size)  # pre-divide, then sum = the average (see top)
        bucket.work = dist.all_reduce(bucket.buffer, group=bucket.group, async_op=True)


GradReadyFn = Callable[[Bucket, nn.Parameter], None]


class BucketDDP(_DataParallelBase):
    """Gradients are reduced in buckets of ~bucket_cap_bytes, overlapping the rest of backward.

    Parameters go into buckets in REVERSE registration order, because backward produces the
    gradients of the last layers first; a parameter's post-accumulate-grad hook calls
    `grad_ready_fn` (default `grad_ready`), which launches the bucket's async all-reduce as soon
    as the bucket is complete. `finish_gradient_synchronization` waits on every handle and copies
    the averaged gradients back into .grad (unflatten).

    Cost per step: n_buckets all-reduces, the same 2(N-1)/N * P bytes per rank as NaiveDDP, plus
    one extra copy of the gradients (in and out of the flat buffers). Every rank must build the
    same buckets and see gradients in the same order, so collectives match (same model, same
    graph). A trainable parameter that gets no gradient leaves its bucket unlaunched: an error
    here (torch DDP's find_unused_parameters=True handles that case).
    """

    def __init__(
        self,
        module: nn.Module,
        bucket_cap_bytes: int = 25 * 2**20,
        group: Any = None,
        broadcast_buffers: bool = True,
        grad_ready_fn: GradReadyFn = grad_ready,
    ):
        super().__init__(module, group, broadcast_buffers)
        if bucket_cap_bytes <= 0:
            raise ValueError(f"bucket_cap_bytes must be positive, got {bucket_cap_bytes}")
        self.bucket_cap_bytes = bucket_cap_bytes
        self.grad_ready_fn = grad_ready_fn
        self.buckets = self._build_buckets(list(reversed(self.params)))
        self._bucket_of = {id(p): b for b in self.buckets for p in b.params}
        self._hooks = [
            p.register_post_accumulate_grad_hook(self._on_grad_ready) for p in self.params
        ]

    def _build_buckets(self, params: list[nn.Parameter]) -> list[Bucket]:
        groups: list[list[nn.Parameter]] = []
        size = 0
        for p in params:
            nbytes = p.numel() * p.element_size()
            # Close the current bucket when it is full, or when the dtype changes (one flat
            # buffer has one dtype). A parameter larger than the cap gets a bucket of its own.
            if not groups or size >= self.bucket_cap_bytes or p.dtype != groups[-1][0].dtype:
                groups.append([])
                size = 0
            groups[-1].append(p)
            size += nbytes
        buckets = []
        for ps in groups:
            offsets = [0]
            for p in ps[:-1]:
                offsets.append(offsets[-1] + p.numel())
            buffer = torch.zeros(sum(p.numel() for p in ps), dtype=ps[0].dtype, device=ps[0].device)
            buckets.append(Bucket(ps, buffer, offsets, self.group, self.world_size))
        return buckets

    @without_autograd_context  # no Python object rides in the work: safe at exit (backward_tls.py)
    def _on_grad_ready(self, param: nn.Parameter) -> None:
        if self._sync_pending:  # under no_sync(): the gradient just accumulates in .grad
            self.grad_ready_fn(self._bucket_of[id(param)], param)

    def finish_gradient_synchronization(self) -> None:
        if not self._sync_pending:
            return
        self._sync_pending = False
        for i, bucket in enumerate(self.buckets):
            if bucket.work is None:
                missing = [self.names[id(p)] for p in bucket.params if p.grad is None]
                arrived, bucket.num_ready = bucket.num_ready, 0
                raise RuntimeError(
                    f"bucket {i} was never launched ({arrived}/{len(bucket.params)} gradients "
                    f"arrived; parameters without a gradient: {missing}). Every trainable "
                    "parameter must get a gradient in every synchronised backward; freeze "
                    "unused ones (requires_grad=False)."
                )
        for bucket in self.buckets:
            bucket.work.wait()  # the all-reduce has been running since it was launched
            for p in bucket.params:
                p.grad.copy_(bucket.grad_view(p))  # unflatten: the averaged gradient back
            bucket.num_ready, bucket.work = 0, None

    def remove_hooks(self) -> None:
        for handle in self._hooks:
            handle.remove()


class _AllReduceSum(torch.autograd.Function):
    """y = sum over ranks of x, differentiable: the gradient of a sum is the sum of the
    gradients, so backward is one more all-reduce (of dL_r/dy summed over ranks r)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        y = x.clone()  # all_reduce works in place; leave the input as autograd saved it
        dist.all_reduce(y, op=dist.ReduceOp.SUM, group=group)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


class SyncBatchNorm1d(nn.Module):
    """BatchNorm1d over the GLOBAL batch: statistics summed over ranks with one all-reduce.

    torch.nn.SyncBatchNorm only runs on GPUs; this CPU version shows the idea. Forward sends one
    all-reduce of (count, sum, sum of squares): 2C + 1 numbers; backward one more of their
    gradients. Wraps an existing BatchNorm1d `bn` (affine, with running stats). Input (B, C).
    """

    def __init__(self, bn: nn.BatchNorm1d, group: Any = None):
        super().__init__()
        self.bn = bn
        self.group = group  # None: the default group (module docstring)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bn = self.bn
        if not self.training:
            return bn(x)  # eval uses the running stats: nothing to synchronise
        count = torch.full((1,), float(x.shape[0]), dtype=x.dtype, device=x.device)
        stats = torch.cat([count, x.sum(0), (x * x).sum(0)])  # (2C + 1,) this rank's shard
        stats = _AllReduceSum.apply(stats, self.group)  # (2C + 1,) the global batch's
        C = x.shape[1]
        n, total, total_sq = stats[0], stats[1 : 1 + C], stats[1 + C :]
        mean = total / n  # (C,)
        var = total_sq / n - mean * mean  # biased variance, what BatchNorm normalises with
        with torch.no_grad():  # running stats use the unbiased variance, as nn.BatchNorm1d does
            m = bn.momentum
            bn.running_mean.mul_(1 - m).add_(m * mean)
            bn.running_var.mul_(1 - m).add_(m * var * n / (n - 1))
            bn.num_batches_tracked += 1
        y = (x - mean) / torch.sqrt(var + bn.eps)  # (B, C)
        return y * bn.weight + bn.bias
