"""Context parallelism: ring attention from isend/irecv and an online softmax (lab 08).

A sequence of T tokens is cut into N contiguous chunks of Tc = T/N, one per rank of `group`:
rank r holds q, k, v of positions [r Tc, (r+1) Tc), each (B, H, Tc, hd). Every other layer is
token-wise and needs nothing from the other ranks; attention needs every key and value, so the
K/V blocks travel around the ring (Liu et al. 2023, "Ring Attention with Blockwise Transformers"):

    step i = 0 .. N-1: rank r holds the K/V block of rank j = (r - i) mod N.
      1. start passing it on: isend to rank r+1, irecv the next one from rank r-1;
      2. meanwhile attend q to this block and fold the result into the running output with the
         online softmax (running max m, running sum l; Milakov & Gimelshein 2018, as in
         FlashAttention, Dao et al. 2022): scores never exist for more than one block;
      3. wait for the transfer.
    Causal masking: block j > r lies entirely in the future (skipped, but still passed on);
    j == r gets the triangular mask; j < r is fully visible.

Backward recomputes each block's probabilities from the saved log-sum-exp (no (Tc, T) score
matrix is kept): the K/V blocks go around the ring again, and their gradient accumulators
dK/dV travel with them, one hop behind, and finally home.

Communication per rank per layer (blk = B*H*Tc*hd*bytes, the size of ONE of K or V):
    forward : (N-1) sends of the (K, V) pair                 = (N-1) * 2 blk
    backward: (N-1) sends of (K, V) + N sends of (dK, dV)    = (2N-1) * 2 blk
Each transfer can hide behind one block's attention compute, which is what makes the ring work.
(Lab 08 checks it against full attention: ``lab_utils.experiments.lab08.ring.check_ring``.)
(Contiguous chunks leave the causal work unbalanced: rank N-1 attends to N blocks, rank 0 to
one. Production code gives each rank two mirrored chunks, "zig-zag", to even it out:
context_variants.py, beside Ulysses and all-gather-KV.)
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

_KV, _GRAD = 0, 1  # p2p tags: K/V blocks and their gradients travel as separate streams


def full_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    """The reference: plain softmax attention on one rank. (B, H, T, hd) -> (B, H, T, hd)."""
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    if causal:
        T = q.shape[-2]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _neighbours(group) -> tuple[int, int, int, int]:
    """(my index in the ring, ring size, global rank of the next rank, of the previous one)."""
    r, n = dist.get_rank(group), dist.get_world_size(group)
    return r, n, dist.get_global_rank(group, (r + 1) % n), dist.get_global_rank(group, (r - 1) % n)


def _start_pass(t: torch.Tensor, nxt: int, prev: int, tag: int):
    """Send t to the next rank and receive the previous rank's block: non-blocking."""
    buf = torch.empty_like(t)
    works = [dist.isend(t.contiguous(), nxt, tag=tag), dist.irecv(buf, prev, tag=tag)]
    return buf, works


def _finish(works) -> None:
    for w in works:
        w.wait()


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float, diagonal: bool) -> torch.Tensor:
    """q k^T * scale for one block pair, (B, H, Tc, Tc); the causal mask on the diagonal block."""
    s = (q @ k.transpose(-2, -1)) * scale
    if diagonal:
        Tc = q.shape[-2]
        s = s.masked_fill(torch.ones(Tc, Tc, dtype=torch.bool).triu(1), float("-inf"))
    return s


class RingAttention(torch.autograd.Function):
    """out = softmax(q K^T / sqrt(hd)) V for this rank's queries against ALL ranks' K/V."""

    @staticmethod
    def forward(ctx, q, k, v, group, causal: bool):
        r, n, nxt, prev = _neighbours(group)
        scale = 1.0 / math.sqrt(q.shape[-1])
        B, H, Tc, _ = q.shape
        m = torch.full((B, H, Tc), float("-inf"))  # running max of the scores, per query
        l = torch.zeros(B, H, Tc)  # running sum of exp(score - m)
        o = torch.zeros_like(q)  # running (unnormalised) output
        kv = torch.stack([k, v])  # (2, B, H, Tc, hd): one message per hop
        for i in range(n):
            j = (r - i) % n  # whose block we hold
            nxt_kv, works = _start_pass(kv, nxt, prev, _KV) if i < n - 1 else (None, [])
            if not (causal and j > r):  # a block entirely in the future adds nothing
                s = _scores(q, kv[0], scale, causal and j == r)  # (B, H, Tc, Tc)
                m_new = torch.maximum(m, s.amax(-1))
                p = torch.exp(s - m_new.unsqueeze(-1))  # masked entries: exp(-inf) = 0
                fix = torch.exp(m - m_new)  # rescale what was summed under the old max
                l = l * fix + p.sum(-1)
                o = o * fix.unsqueeze(-1) + p @ kv[1]
                m = m_new
            _finish(works)
            kv = nxt_kv
        out = o / l.unsqueeze(-1)
        ctx.save_for_backward(q, k, v, out, m + torch.log(l))  # lse: (B, H, Tc)
        ctx.group, ctx.causal = group, causal
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        r, n, nxt, prev = _neighbours(ctx.group)
        scale = 1.0 / math.sqrt(q.shape[-1])
        delta = (d_out * out).sum(-1, keepdim=True)  # (B, H, Tc, 1): rowsum(dO * O)
        dq = torch.zeros_like(q)
        kv = torch.stack([k, v])
        dkv = torch.zeros_like(kv)  # the accumulator of the block we hold, travels with it
        for i in range(n):
            j = (r - i) % n
            nxt_kv, works = _start_pass(kv, nxt, prev, _KV) if i < n - 1 else (None, [])
            if not (ctx.causal and j > r):
                s = _scores(q, kv[0], scale, ctx.causal and j == r)
                p = torch.exp(s - lse.unsqueeze(-1))  # recomputed probabilities (B, H, Tc, Tc)
                dkv[1] += p.transpose(-2, -1) @ d_out  # dV_j += P^T dO
                ds = p * (d_out @ kv[1].transpose(-2, -1) - delta)  # softmax backward
                dq += (ds @ kv[0]) * scale
                dkv[0] += (ds.transpose(-2, -1) @ q) * scale  # dK_j += dS^T q
            _finish(works)
            if n > 1:  # the accumulator follows its block to the next rank (the last hop: home)
                dkv, grad_works = _start_pass(dkv, nxt, prev, _GRAD)
                _finish(grad_works)
            kv = nxt_kv
        return dq, dkv[0], dkv[1], None, None


def ring_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group, causal: bool = True
) -> torch.Tensor:
    """Attention of this rank's (B, H, T/N, hd) chunk of queries over the whole sequence."""
    return RingAttention.apply(q, k, v, group, causal)


def kv_block_bytes(
    batch: int, heads: int, seq_len: int, head_dim: int, n: int, bytes_per_elem: int = 4
) -> int:
    """blk: bytes of ONE of K or V for one rank's chunk of T/n tokens."""
    return batch * heads * (seq_len // n) * head_dim * bytes_per_elem


def ring_bytes(
    batch: int, heads: int, seq_len: int, head_dim: int, n: int, bytes_per_elem: int = 4
) -> dict[str, int]:
    """Bytes one rank sends per layer: forward (N-1) x (K, V); backward adds N x (dK, dV)."""
    blk = kv_block_bytes(batch, heads, seq_len, head_dim, n, bytes_per_elem)
    return {"forward": (n - 1) * 2 * blk, "backward": ((n - 1) + (n if n > 1 else 0)) * 2 * blk}
