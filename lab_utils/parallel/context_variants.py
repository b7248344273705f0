"""Context parallelism beside the ring: Ulysses, Llama 3's all-gather-KV, zig-zag (lab 08).

Every variant takes this rank's share of the sequence, q, k, v each (B, H, Tc, hd) with
Tc = T/N, and returns the attention output for those queries, like ``ring_attention``.
blk = B*H*Tc*hd*bytes, the size of ONE of this rank's q, k, v chunks.

DeepSpeed-Ulysses (Jacobs et al. 2023, "DeepSpeed Ulysses", Sec. 3): turn the sequence shard
into a head shard and back.
    all-to-all q, k, v: (B, H, T/N, hd) sequence-sharded -> (B, H/N, T, hd) head-sharded;
    plain attention on the whole sequence for H/N heads (heads are independent);
    all-to-all the output back: (B, H/N, T, hd) -> (B, H, T/N, hd).
    Each all-to-all sends (N-1)/N of its buffer: forward 4 (q, k, v, out), backward 4 (their
    gradients) = 4 (N-1)/N blk each way. The limit: N must divide H (with grouped-query
    attention, the K/V heads too), so the CP degree cannot exceed the head count.

Llama 3 (Llama Team 2024, "The Llama 3 Herd of Models", Sec. 3.3.2): all-gather K and V, attend
the local queries to them with the causal mask, and reduce-scatter dK, dV in backward.
    forward : all-gather (K, V)          (N-1)/N x 2N blk = 2 (N-1) blk
    backward: reduce-scatter (dK, dV)    the same 2 (N-1) blk
    Not overlapped like the ring, but K/V are small under grouped-query attention (8 K/V heads
    for 128 query heads in Llama 3 405B) and the mask can be anything (document masks).

Zig-zag (used by Llama 3, and by ring attention in Megatron-LM and zhuzilin/ring-flash-attention):
with contiguous chunks rank r's queries see (r+1) chunks of keys under the causal mask, so rank
N-1 works N times as hard as rank 0. Cut the sequence into 2N chunks and give rank i chunks i and
2N-1-i: every rank then attends (i+1) + (2N-i) = 2N+1 half-chunks, the same work everywhere.

Local attention is torch's ``scaled_dot_product_attention`` (on CPU its flash kernel: it saves
q, k, v, out and the log-sum-exp, never the (L, S) probabilities). Lab 08 checks every variant
against full attention: ``lab_utils.experiments.lab08.cp``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


def _check_heads(heads: int, n: int) -> None:
    if heads % n:
        raise ValueError(
            f"Ulysses needs the CP degree to divide the number of heads: heads={heads}"
            f" is not divisible by the group size N={n}; use N in "
            f"{[d for d in range(1, heads + 1) if heads % d == 0]}, or ring attention"
        )


def _all_to_all(x: torch.Tensor, group) -> torch.Tensor:
    """Chunk j of dim 0 goes to rank j; chunk j of the result came from rank j."""
    x = x.contiguous()
    out = torch.empty_like(x)  # after .contiguous(): empty_like would copy a view's strides
    dist.all_to_all_single(out, x, group=group)
    return out


def seq_to_heads(x: torch.Tensor, group) -> torch.Tensor:
    """(B, H, T/N, hd) sequence-sharded -> (B, H/N, T, hd) head-sharded: one all-to-all."""
    n = dist.get_world_size(group)
    B, H, Tc, hd = x.shape
    send = x.reshape(B, n, H // n, Tc, hd).transpose(0, 1)  # (N, B, H/N, Tc, hd): to rank j
    recv = _all_to_all(send, group)  # chunk j: my head group, rank j's positions
    return recv.permute(1, 2, 0, 3, 4).reshape(B, H // n, n * Tc, hd)


def heads_to_seq(x: torch.Tensor, group) -> torch.Tensor:
    """(B, H/N, T, hd) head-sharded -> (B, H, T/N, hd) sequence-sharded: the inverse."""
    n = dist.get_world_size(group)
    B, Hn, T, hd = x.shape
    send = x.reshape(B, Hn, n, T // n, hd).permute(2, 0, 1, 3, 4)  # (N, B, H/N, Tc, hd)
    recv = _all_to_all(send, group)  # chunk j: rank j's head group, my positions
    return recv.transpose(0, 1).reshape(B, n * Hn, T // n, hd)


class _SeqToHeads(torch.autograd.Function):
    """Forward seq -> heads; the gradient goes back the other way (heads -> seq)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return seq_to_heads(x, group)

    @staticmethod
    def backward(ctx, g):
        return heads_to_seq(g, ctx.group), None


class _HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return heads_to_seq(x, group)

    @staticmethod
    def backward(ctx, g):
        return seq_to_heads(g, ctx.group), None


def ulysses_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group, causal: bool = True
) -> torch.Tensor:
    """DeepSpeed-Ulysses: all-to-all to head shards, full attention, all-to-all back."""
    _check_heads(q.shape[1], dist.get_world_size(group))
    qh, kh, vh = (_SeqToHeads.apply(t, group) for t in (q, k, v))  # (B, H/N, T, hd)
    out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
    return _HeadsToSeq.apply(out, group)  # (B, H, T/N, hd)


class _GatherSeq(torch.autograd.Function):
    """All-gather along dim 0 in forward; reduce-scatter (sum) of the gradient in backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        out = x.new_empty((dist.get_world_size(group) * x.shape[0], *x.shape[1:]))
        dist.all_gather_into_tensor(out, x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        out = g.new_empty((g.shape[0] // dist.get_world_size(ctx.group), *g.shape[1:]))
        dist.reduce_scatter_tensor(out, g.contiguous(), group=ctx.group)
        return out, None


def zigzag_chunks(rank: int, n: int) -> tuple[int, int]:
    """The two of 2N sequence chunks rank holds under zig-zag: i and 2N-1-i."""
    return rank, 2 * n - 1 - rank


def zigzag_shard(x: torch.Tensor, rank: int, n: int, dim: int = 2) -> torch.Tensor:
    """This rank's zig-zag share of a full tensor: chunks i and 2N-1-i, concatenated."""
    parts = x.chunk(2 * n, dim=dim)
    return torch.cat([parts[c] for c in zigzag_chunks(rank, n)], dim=dim)


def _causal_prefix(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, end: int) -> torch.Tensor:
    """Queries at positions [end-L, end) against keys [0, end), causal (bottom-right aligned)."""
    L = q.shape[-2]
    mask = torch.ones(L, end, dtype=torch.bool).tril(end - L)  # query i sees keys <= end-L+i
    return F.scaled_dot_product_attention(q, k[..., :end, :], v[..., :end, :], attn_mask=mask)


def allgather_kv_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group,
    causal: bool = True,
    zigzag: bool = False,
) -> torch.Tensor:
    """Llama 3's CP: all-gather K and V, attend the local queries with the causal mask.

    zigzag=False: this rank holds contiguous positions [r Tc, (r+1) Tc).
    zigzag=True : it holds chunks r and 2N-1-r of 2N (``zigzag_shard``), in that order.
    """
    r, n = dist.get_rank(group), dist.get_world_size(group)
    kv = _GatherSeq.apply(torch.stack([k, v]).unsqueeze(0), group)  # (N, 2, B, H, Tc, hd)
    _, _, B, H, Tc, hd = kv.shape
    if zigzag:  # rank j sent chunks (j, 2N-1-j): put the 2N half-chunks back in order
        halves = kv.reshape(n, 2, B, H, 2, Tc // 2, hd)  # [j, :, :, :, 0 or 1]: its 2 chunks
        owner = [(c, 0) if c < n else (2 * n - 1 - c, 1) for c in range(2 * n)]
        kv = torch.stack([halves[j, :, :, :, h] for j, h in owner], dim=3)  # (2,B,H,2N,Th,hd)
    else:
        kv = kv.permute(1, 2, 3, 0, 4, 5)  # (2, B, H, N, Tc, hd)
    kv = kv.reshape(2, B, H, n * Tc, hd)  # (K, V) of the whole sequence, in order
    K, V = kv[0], kv[1]
    if not causal:
        return F.scaled_dot_product_attention(q, K, V)
    if not zigzag:
        return _causal_prefix(q, K, V, (r + 1) * Tc)
    Th = Tc // 2
    return torch.cat(
        [
            _causal_prefix(qc, K, V, (c + 1) * Th)
            for qc, c in zip(q.chunk(2, dim=2), zigzag_chunks(r, n))
        ],
        dim=2,
    )
