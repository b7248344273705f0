"""Tensor parallelism from scratch, Megatron-style (lab 06). Communication lives in comm.py.

Notation: t ranks in the tensor-parallel `group`, activations (B, T, C), D = B*T*C*bytes.

    ColumnParallelLinear  Y_i = X A_i (A split by output features). Forward: f (nothing);
                          backward: 1 all-reduce of the input grad, 2(t-1)/t * D bytes per rank.
    RowParallelLinear     Y = sum_i X_i A_i (A split by input features). Forward: g = 1 all-reduce
                          of the partial outputs, 2(t-1)/t * D per rank; bias added ONCE, after it.
    TPMLP                 column -> GELU -> row: no comm between the two matmuls (GELU is
                          elementwise on a column shard), so 1 all-reduce forward, 1 backward.
    TPAttention           q, k, v column-parallel (fused, each rank owns n_head/t whole heads),
                          proj row-parallel: again 1 all-reduce forward, 1 backward.
    => 2 all-reduces per transformer layer forward, 2 backward (Shoeybi et al. 2019, Sec. 3).

With sequence_parallel=True (Korthikanti et al. 2022, Sec. 4.2.2) the LayerNorms, residuals and
dropouts work on a (B, T/t, C) slice; each all-reduce becomes a reduce-scatter + all-gather (the
same ring bytes per TP collective) and the activations they keep shrink by t. In backward each
column-parallel linear gathers its sequence-sharded input once more (its weight gradient needs
the whole input): one extra all-gather per column-parallel linear, 2 per layer. Replicated
parameters that then see only T/t tokens (LayerNorms, row-parallel biases) need their gradients
all-reduced: sync_sequence_parallel_grads.

Vocabulary parallelism: VocabParallelEmbedding (1 all-reduce of (B, T, C) forward) and a
column-parallel head whose (B, T, V/t) logits go to comm.vocab_parallel_cross_entropy (3
all-reduces of B*T values) instead of being gathered (an all-gather of B*T*V).

Every module is built FROM the unsharded one by slicing its weights, so a sharded model can be
checked against the original (``lab_utils.experiments.unshard.unshard`` gathers the weights or
gradients back under the original names).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from lab_utils.parallel.tensor_parallel.comm import (
    copy_to_tp,
    gather_from_sequence,
    gather_from_tp,
    reduce_from_tp,
    reduce_scatter_to_sequence,
    scatter_to_sequence,
    sequence_gather_linear,
)
from lab_utils.parallel.tensor_parallel.rng import TPDropout, TPRandom

# -- the parallel linears ----------------------------------------------------------------------


def _rank_and_size(group) -> tuple[int, int]:
    return dist.get_rank(group), dist.get_world_size(group)


class ColumnParallelLinear(nn.Module):
    """Split OUTPUT features: rank i keeps rows i of each source weight, (N/t, C).

    Several linears with the same input (q, k, v) fuse into one matmul: local weight
    cat(Wq_i, Wk_i, Wv_i), so f (and its backward all-reduce) happens once, not three times.
    Forward: f = nothing [SP: 1 all-gather, (t-1)/t D]; gather_output=True adds an all-gather of
    the (B, T, N) output. Backward: 1 all-reduce of the input gradient [SP: re-gather + RS].
    """

    def __init__(
        self,
        linears: nn.Linear | Sequence[nn.Linear],
        group,
        gather_output: bool = False,
        sequence_parallel: bool = False,
    ):
        super().__init__()
        linears = [linears] if isinstance(linears, nn.Linear) else list(linears)
        rank, t = _rank_and_size(group)
        for lin in linears:
            if lin.out_features % t or lin.in_features != linears[0].in_features:
                raise ValueError(f"cannot split {lin} by columns over {t} ranks")
        self.group, self.gather_output, self.sequence_parallel = (
            group,
            gather_output,
            sequence_parallel,
        )
        self.part_sizes = [lin.out_features // t for lin in linears]
        weight = torch.cat([lin.weight.detach().chunk(t, 0)[rank] for lin in linears])  # (N/t, C)
        self.weight = nn.Parameter(weight.clone())
        has_bias = linears[0].bias is not None
        self.bias = (
            nn.Parameter(torch.cat([lin.bias.detach().chunk(t)[rank] for lin in linears]).clone())
            if has_bias
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sequence_parallel:  # x: (B, T/t, C)
            y = sequence_gather_linear(x, self.weight, self.bias, self.group)  # (B, T, N/t)
        else:  # x: (B, T, C), the same on every rank
            y = F.linear(copy_to_tp(x, self.group), self.weight, self.bias)  # (B, T, N/t)
        return gather_from_tp(y, self.group) if self.gather_output else y  # (B, T, N)


class RowParallelLinear(nn.Module):
    """Split INPUT features: rank i keeps columns i of the weight, (N, C/t); the bias stays whole.

    Forward: y_i = x_i A_i^T is a PARTIAL sum; g all-reduces it (2(t-1)/t D per rank) [SP: a
    reduce-scatter onto the sequence slice, (t-1)/t D]; then the bias is added once. Adding it
    before the reduce would add it t times. Backward: nothing [SP: 1 all-gather of the grad].
    """

    def __init__(self, linear: nn.Linear, group, sequence_parallel: bool = False):
        super().__init__()
        rank, t = _rank_and_size(group)
        if linear.in_features % t:
            raise ValueError(f"cannot split {linear} by rows over {t} ranks")
        self.group, self.sequence_parallel = group, sequence_parallel
        self.weight = nn.Parameter(linear.weight.detach().chunk(t, 1)[rank].clone())  # (N, C/t)
        self.bias = nn.Parameter(linear.bias.detach().clone()) if linear.bias is not None else None
        if self.bias is not None and sequence_parallel:
            self.bias.sequence_parallel = True  # sees T/t tokens: grads need sync

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = F.linear(x, self.weight)  # (B, T, C/t) @ (C/t, N) -> (B, T, N), partial sum
        if self.sequence_parallel:
            y = reduce_scatter_to_sequence(partial, self.group)  # (B, T/t, N)
        else:
            y = reduce_from_tp(partial, self.group)  # (B, T, N), the same on every rank
        return y + self.bias if self.bias is not None else y


# -- the Megatron blocks -----------------------------------------------------------------------


class TPMLP(nn.Module):
    """fc (column) -> GELU -> proj (row) -> dropout. (B, T, C) -> (B, T, 4C/t) -> (B, T, C)."""

    def __init__(
        self, mlp: nn.Module, group, sequence_parallel: bool = False, rng: TPRandom | None = None
    ):
        super().__init__()
        self.fc = ColumnParallelLinear(mlp.fc, group, sequence_parallel=sequence_parallel)
        self.act = mlp.act
        self.proj = RowParallelLinear(mlp.proj, group, sequence_parallel)
        # Output dropout: replicated region without SP (same mask on every rank), a sequence slice
        # with SP (each rank its own tokens -> the sharded stream).
        self.drop = TPDropout(mlp.drop.p, rng if sequence_parallel else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(self.act(self.fc(x))))


class TPAttention(nn.Module):
    """Causal self-attention with n_head/t whole heads per rank; the same math as
    models.CausalSelfAttention. Heads never talk to each other, so no comm inside attention."""

    def __init__(
        self, attn: nn.Module, group, sequence_parallel: bool = False, rng: TPRandom | None = None
    ):
        super().__init__()
        t = dist.get_world_size(group)
        n_head = attn.q.out_features // attn.head_dim
        if n_head % t:
            raise ValueError(f"n_head={n_head} must be divisible by tp={t} (whole heads per rank)")
        self.head_dim = attn.head_dim
        self.qkv = ColumnParallelLinear(
            [attn.q, attn.k, attn.v], group, sequence_parallel=sequence_parallel
        )
        self.proj = RowParallelLinear(attn.proj, group, sequence_parallel)
        if attn.attn_drop.p > 0 and rng is None:
            raise ValueError("attention dropout on split heads needs the sharded stream: pass rng")
        self.attn_drop = TPDropout(attn.attn_drop.p, rng)  # own heads: sharded stream, always
        self.resid_drop = TPDropout(attn.resid_drop.p, rng if sequence_parallel else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (B, T, C/t): this rank's heads
        B, T, _ = q.shape
        q = q.view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H/t, T, hd)
        k = k.view(B, T, -1, self.head_dim).transpose(1, 2)
        v = v.view(B, T, -1, self.head_dim).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / self.head_dim**0.5  # (B, H/t, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(diagonal=1)
        att = self.attn_drop(F.softmax(att.masked_fill(future, float("-inf")), dim=-1))
        y = (att @ v).transpose(1, 2).reshape(B, T, -1)  # (B, T, C/t)
        return self.resid_drop(self.proj(y))  # (B, T, C) [SP: (B, T/t, C)]


class VocabParallelEmbedding(nn.Module):
    """Split the VOCABULARY: rank i keeps rows [i V/t, (i+1) V/t) of the table, (V/t, C).
    A rank looks up the ids it owns, writes zeros for the others, and g all-reduces:
    (B, T) -> (B, T, C), 1 all-reduce of B*T*C values forward, nothing backward."""

    def __init__(self, embedding: nn.Embedding, group):
        super().__init__()
        rank, t = _rank_and_size(group)
        if embedding.num_embeddings % t:
            raise ValueError(f"vocab {embedding.num_embeddings} is not divisible by tp={t}")
        self.group, self.rows = group, embedding.num_embeddings // t
        self.start = rank * self.rows
        self.weight = nn.Parameter(embedding.weight.detach().chunk(t, 0)[rank].clone())

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        local = idx - self.start
        outside = (local < 0) | (local >= self.rows)  # ids another rank owns
        out = F.embedding(local.masked_fill(outside, 0), self.weight)  # (B, T, C)
        return reduce_from_tp(out.masked_fill(outside.unsqueeze(-1), 0.0), self.group)


# -- a whole TinyGPT ---------------------------------------------------------------------------


def parallelize_block(
    block: nn.Module, group, sequence_parallel: bool = False, rng: TPRandom | None = None
) -> nn.Module:
    """Megatron TP on one transformer block, IN PLACE: attention and MLP become TPAttention and
    TPMLP (q, k, v, fc column-parallel; attn.proj, mlp.proj row-parallel). The one TP plan of
    our layers: tensor_parallelize (a TinyGPT, lab 06) and compose.apply_tp_ours (a pipeline
    stage, lab 08) both call it. Per block: forward 2 all-reduces, backward 2 [SP: 2 all-gathers
    + 2 reduce-scatters forward; 2 reduce-scatters + 4 all-gathers backward]."""
    block.attn = TPAttention(block.attn, group, sequence_parallel, rng)
    block.mlp = TPMLP(block.mlp, group, sequence_parallel, rng)
    if sequence_parallel:  # LayerNorms see T/t tokens: mark their params for the grad sync
        for p in [*block.ln1.parameters(), *block.ln2.parameters()]:
            p.sequence_parallel = True
    return block


def tensor_parallelize(
    model: nn.Module,
    group,
    sequence_parallel: bool = False,
    rng: TPRandom | None = None,
    vocab_parallel: bool = False,
    gather_logits: bool = True,
) -> nn.Module:
    """Turn a TinyGPT's blocks into Megatron TP blocks IN PLACE (same parameter names; the
    sharded weights are slices of the originals). Embeddings, final LayerNorm and head stay
    replicated unless vocab_parallel=True: vocab-parallel embedding and a column-parallel head,
    whose logits are all-gathered (gather_logits=True, so lm_loss works unchanged) or left split
    (B, T, V/t) for comm.vocab_parallel_cross_entropy. With sequence_parallel=True the first
    block keeps only its sequence slice of the input (no comm) and the last block's output is
    all-gathered (backward: keep my slice). Dropout > 0 needs rng = seed_tensor_parallel(...).
    Per layer: forward 2 all-reduces [SP: 2 all-gathers + 2 reduce-scatters]; backward the same
    [SP: + 2 re-gathers], plus (SP) one all-reduce of the LayerNorm/bias grads per step."""
    t = dist.get_world_size(group)
    if model.cfg.dropout > 0 and rng is None:
        raise ValueError(
            "dropout > 0: pass rng=seed_tensor_parallel(seed, group) so masks are "
            "equal where activations are replicated and differ where sharded"
        )
    if sequence_parallel and model.cfg.seq_len % t:
        raise ValueError(f"sequence parallelism needs tp={t} to divide seq_len={model.cfg.seq_len}")
    for block in model.blocks:
        parallelize_block(block, group, sequence_parallel, rng)
    model.drop = TPDropout(model.drop.p)  # embedding dropout: replicated region
    if sequence_parallel:
        model.blocks[0].register_forward_pre_hook(
            lambda _, args: (scatter_to_sequence(args[0], group),)
        )  # (B, T, C) -> (B, T/t, C)
        model.blocks[-1].register_forward_hook(
            lambda _, args, out: gather_from_sequence(out, group, reduce_grad=False)
        )
    if vocab_parallel:
        if model.head.weight is model.tok_emb.weight:
            raise ValueError("vocab_parallel with tied weights is not supported here")
        model.tok_emb = VocabParallelEmbedding(model.tok_emb, group)
        model.head = ColumnParallelLinear(model.head, group, gather_output=gather_logits)
    return model


def sync_sequence_parallel_grads(model: nn.Module, group) -> int:
    """All-reduce (ONE coalesced call) the grads of replicated params that saw only a sequence
    slice (LayerNorms, row-parallel biases). Returns the bytes all-reduced (0 without SP)."""
    grads = [
        p.grad
        for p in model.parameters()
        if getattr(p, "sequence_parallel", False) and p.grad is not None
    ]
    if not grads:
        return 0
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat, group=group)
    for g, new in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(new.view_as(g))
    return flat.numel() * flat.element_size()
