"""The communication of tensor parallelism, one autograd function per pattern (lab 06).

Megatron's two conjugate operators (Shoeybi et al. 2019, Sec. 3, Fig. 3):

    f = copy_to_tp     forward: identity            backward: all-reduce the input gradient
    g = reduce_from_tp forward: all-reduce          backward: identity

f sits before a column-parallel linear (every rank needs the whole input; each rank's input
gradient is only the part coming from its own columns, so the parts are summed); g sits after a
row-parallel linear (each rank holds a partial sum of the output). They are conjugate: the
forward of one is the backward of the other.

Sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2) cuts the activations BETWEEN the
tensor-parallel regions along the sequence dim; all-reduce = reduce-scatter + all-gather, so g
splits into a reduce-scatter (leave the TP region onto a sequence shard) and f into an
all-gather (enter it again), the same ring bytes per TP collective. Not the same bytes per step:
the column-parallel linear keeps only its sequence shard of the input and gathers it AGAIN in
backward (``sequence_gather_linear``), one extra all-gather per column-parallel linear:

    gather_from_sequence       forward: all-gather along T   backward: reduce-scatter (or split)
    reduce_scatter_to_sequence forward: reduce-scatter on T  backward: all-gather along T
    scatter_to_sequence        forward: keep my T-slice      backward: all-gather along T

Activations are (B, T, C) (batch first, as in lab_utils.models), so the sequence dim is 1.
Cost per call for a full (B, T, C) tensor of D = B*T*C*bytes over t ranks, bytes SENT per rank
by a ring (lab_utils.calc.comm.ring_bytes_per_rank): all-reduce 2(t-1)/t D; all-gather and
reduce-scatter (t-1)/t D each. Every collective is a plain dist.* call that moves a COPY (the
collectives work in place, and an incoming gradient may be shared with another branch).

``vocab_parallel_cross_entropy``: the loss on vocab-split logits with 3 all-reduces of B*T values
(max, target logit, sum of exps) instead of gathering the B*T*V logits.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.autograd import Function

SEQ_DIM = 1  # activations are (B, T, C)


# -- helpers: the three collectives along a tensor dim -----------------------------------------


def all_reduce_copy(x: torch.Tensor, group) -> torch.Tensor:
    x = x.contiguous().clone()
    dist.all_reduce(x, op=dist.ReduceOp.SUM, group=group)
    return x


def all_gather_along(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    """(.., n, ..) on each of t ranks -> (.., t*n, ..), rank order along `dim`: ONE all-gather,
    (t-1)/t of the gathered bytes sent per rank. No autograd (the functions below add it)."""
    parts = [
        torch.empty_like(x, memory_format=torch.contiguous_format)
        for _ in range(dist.get_world_size(group))
    ]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def _reduce_scatter(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    """(.., t*n, ..) on each rank -> (.., n, ..): my slice of the sum over ranks."""
    t = dist.get_world_size(group)
    if x.shape[dim] % t:
        raise ValueError(f"dim {dim} of size {x.shape[dim]} does not split into {t} equal parts")
    chunks = [c.contiguous() for c in x.chunk(t, dim=dim)]
    out = torch.empty_like(chunks[0])
    dist.reduce_scatter(out, chunks, op=dist.ReduceOp.SUM, group=group)
    return out


def _my_slice(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    t, r = dist.get_world_size(group), dist.get_rank(group)
    if x.shape[dim] % t:
        raise ValueError(f"dim {dim} of size {x.shape[dim]} does not split into {t} equal parts")
    return x.chunk(t, dim=dim)[r].contiguous()


# -- f and g -----------------------------------------------------------------------------------


class _CopyToTP(Function):
    """f: identity forward, all-reduce backward (the input gradient is a sum over column shards)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce_copy(grad, ctx.group), None


class ReduceFromTP(Function):
    """g: all-reduce forward (sum the partial outputs of a row-parallel linear), identity
    backward."""

    @staticmethod
    def forward(ctx, x, group):
        return all_reduce_copy(x, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(x: torch.Tensor, group) -> torch.Tensor:
    """f. Forward: nothing. Backward: one all-reduce of x's size (2(t-1)/t * D bytes per rank)."""
    return _CopyToTP.apply(x, group)


def reduce_from_tp(x: torch.Tensor, group) -> torch.Tensor:
    """g. Forward: one all-reduce of x's size (2(t-1)/t * D bytes per rank). Backward: nothing."""
    return ReduceFromTP.apply(x, group)


# -- sequence parallelism ----------------------------------------------------------------------


class _GatherFromSequence(Function):
    @staticmethod
    def forward(ctx, x, group, reduce_grad):
        ctx.group, ctx.reduce_grad = group, reduce_grad
        return all_gather_along(x, SEQ_DIM, group)  # (B, T/t, C) -> (B, T, C)

    @staticmethod
    def backward(ctx, grad):
        if ctx.reduce_grad:  # consumers were sharded (column-parallel): sum their partial grads
            return _reduce_scatter(grad, SEQ_DIM, ctx.group), None, None
        return _my_slice(grad, SEQ_DIM, ctx.group), None, None  # consumers were replicated


class _ReduceScatterToSequence(Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _reduce_scatter(x, SEQ_DIM, group)  # (B, T, C) partial sums -> (B, T/t, C)

    @staticmethod
    def backward(ctx, grad):
        return all_gather_along(grad, SEQ_DIM, ctx.group), None


class _ScatterToSequence(Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _my_slice(x, SEQ_DIM, group)  # (B, T, C) replicated -> (B, T/t, C)

    @staticmethod
    def backward(ctx, grad):
        return all_gather_along(grad, SEQ_DIM, ctx.group), None


def gather_from_sequence(x: torch.Tensor, group, reduce_grad: bool = True) -> torch.Tensor:
    """All-gather along T: (B, T/t, C) -> (B, T, C), (t-1)/t * D bytes per rank.
    Backward: reduce-scatter (reduce_grad=True, the consumer is tensor-parallel, e.g. the
    column-parallel linear whose input gradients are partial) or just keep my slice
    (reduce_grad=False, the consumer is replicated, e.g. the final LayerNorm and head)."""
    return _GatherFromSequence.apply(x, group, reduce_grad)


def reduce_scatter_to_sequence(x: torch.Tensor, group) -> torch.Tensor:
    """Reduce-scatter along T: partial (B, T, C) -> summed (B, T/t, C), (t-1)/t * D bytes per
    rank. Replaces g after a row-parallel linear. Backward: all-gather of the gradient."""
    return _ReduceScatterToSequence.apply(x, group)


def scatter_to_sequence(x: torch.Tensor, group) -> torch.Tensor:
    """Keep my slice of T (no communication). Backward: all-gather of the gradient."""
    return _ScatterToSequence.apply(x, group)


class _GatherFromTP(Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return all_gather_along(x, -1, group)  # (.., N/t) -> (.., N)

    @staticmethod
    def backward(ctx, grad):
        return _my_slice(grad, -1, ctx.group), None


def gather_from_tp(x: torch.Tensor, group) -> torch.Tensor:
    """All-gather along the LAST dim (a column-parallel output -> the full output),
    (t-1)/t * D bytes per rank. Backward: keep my slice (no communication)."""
    return _GatherFromTP.apply(x, group)


class _SequenceGatherLinear(Function):
    """y = all_gather_T(x) @ W^T + b, saving only the (B, T/t, C) shard for backward.

    Korthikanti et al.'s memory count for sequence parallelism (34/t sbh per layer) stores the
    input of the column-parallel linear SHARDED; Megatron-LM therefore gathers it a second time in
    backward (and overlaps that all-gather with the input-gradient matmul). Communication:
    forward 1 all-gather; backward 1 all-gather (re-gather) + 1 reduce-scatter (input gradient).
    """

    @staticmethod
    def forward(ctx, x, weight, bias, group):
        ctx.group, ctx.has_bias = group, bias is not None
        ctx.save_for_backward(x, weight)  # x: (B, T/t, C) - the shard, not the gathered input
        full = all_gather_along(x, SEQ_DIM, group)  # (B, T, C)
        return torch.nn.functional.linear(full, weight, bias)  # (B, T, N/t)

    @staticmethod
    def backward(ctx, grad):  # grad: (B, T, N/t)
        x, weight = ctx.saved_tensors
        full = all_gather_along(
            x, SEQ_DIM, ctx.group
        )  # re-gather: memory traded for one collective
        grad_full = grad @ weight  # (B, T, C): this rank's columns' share of the input gradient
        grad_w = grad.flatten(0, 1).t() @ full.flatten(0, 1)  # (N/t, C)
        grad_b = grad.flatten(0, 1).sum(0) if ctx.has_bias else None
        return _reduce_scatter(grad_full, SEQ_DIM, ctx.group), grad_w, grad_b, None


def sequence_gather_linear(x, weight, bias, group) -> torch.Tensor:
    """Column-parallel linear on a sequence-sharded input (B, T/t, C) -> (B, T, N/t)."""
    return _SequenceGatherLinear.apply(x, weight, bias, group)


# -- vocab-parallel cross-entropy ---------------------------------------------------------------


class _VocabParallelCrossEntropy(Function):
    """Cross-entropy on logits split by vocabulary, WITHOUT gathering the (N, V) logits
    (Shoeybi et al. 2019, Sec. 3: "fuse the output GEMM with the cross-entropy loss").
    Forward: 3 all-reduces of N values each (max, target logit, sum of exps) instead of an
    all-gather of N*V. Backward: softmax - one_hot, on the local vocab slice, no communication."""

    @staticmethod
    def forward(ctx, logits, targets, group):  # logits (N, V/t), targets (N,)
        rank, v_local = dist.get_rank(group), logits.shape[-1]
        start = rank * v_local
        row_max = logits.max(dim=-1).values  # (N,) local max ...
        dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)  # ... -> global max
        shifted = logits - row_max.unsqueeze(-1)  # for a stable exp
        local_t = targets - start
        outside = (local_t < 0) | (local_t >= v_local)  # target owned by another rank
        local_t = local_t.masked_fill(outside, 0)
        target_logit = shifted.gather(-1, local_t.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0)
        dist.all_reduce(target_logit, group=group)  # exactly one rank contributes each row
        exp = shifted.exp()
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp, group=group)
        ctx.save_for_backward(exp / sum_exp.unsqueeze(-1), local_t, outside)
        return sum_exp.log() - target_logit  # (N,) per-token loss

    @staticmethod
    def backward(ctx, grad):  # grad (N,)
        softmax, local_t, outside = ctx.saved_tensors
        g = softmax.clone()
        rows = torch.arange(g.shape[0], device=g.device)
        g[rows, local_t] -= (~outside).to(g.dtype)  # subtract one_hot where I own the target
        return g * grad.unsqueeze(-1), None, None


def vocab_parallel_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, group
) -> torch.Tensor:
    """Per-token loss (N,) from this rank's vocab slice of the logits (N, V/t) (rank i owns
    classes [i V/t, (i+1) V/t)). .mean() of it equals F.cross_entropy on the full logits."""
    return _VocabParallelCrossEntropy.apply(logits, targets, group)
