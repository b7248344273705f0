"""Ring attention across packed documents (lab 14).

Packing puts several documents in one row; attention must stay inside each document (a
block-diagonal causal mask). cp_packed_docs runs the course's ring attention
(parallel/context_parallel.py) with its plain CAUSAL mask over a packed row: tokens attend to
the documents before theirs, which the reference forbids (axolotl#3608: ring attention across
packed-sample boundaries inflated the loss 1.83x; its fix is the "varlen_llama3" path). The fix
here is the same idea: gather K and V (Llama 3's context parallelism, as in
context_variants.allgather_kv_attention) and apply the document mask.

The model: emb -> qkv -> attn -> proj -> head, one attention layer, 2 heads; 4 CP ranks hold 4
consecutive positions each of a 16-token row with documents of 5, 7 and 4 tokens.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from lab_utils.correctness.case import Case, RankEnv
from lab_utils.correctness.layout import Layout, Partial, Shard, replicated
from lab_utils.correctness.recorder import Recorder
from lab_utils.correctness.zoo.model import VOCAB, WIDTH
from lab_utils.models import lm_loss
from lab_utils.parallel.collectives import all_reduce_flat
from lab_utils.parallel.context_parallel import ring_attention
from lab_utils.parallel.tensor_parallel import gather_from_sequence

WORLD, HEADS, LENGTH, ROWS = 4, 2, 16, 2
DOCS = (5, 7, 4)  # document lengths packed into each row
CP = tuple(range(WORLD))
Kernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def document_ids() -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(len(DOCS)), torch.tensor(DOCS))  # (T,)


def document_mask(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """(len(rows), len(cols)) True where the query may see the key: causal, same document."""
    doc = document_ids()
    return (cols[None, :] <= rows[:, None]) & (doc[rows][:, None] == doc[cols][None, :])


class Attention(nn.Module):
    """(B, T, 3C) fused q, k, v -> (B, T, C) through ``kernel`` on (B, H, T, hd) heads."""

    def __init__(self, kernel: Kernel) -> None:
        super().__init__()
        self.kernel = kernel

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        B, T, _ = qkv.shape
        q, k, v = (t.view(B, T, HEADS, -1).transpose(1, 2) for t in qkv.chunk(3, -1))
        return self.kernel(q, k, v).transpose(1, 2).reshape(B, T, WIDTH)


class PackedLM(nn.Module):
    def __init__(self, kernel: Kernel) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.attn = Attention(kernel)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.proj(self.attn(self.qkv(self.emb(idx)))))


def packed_batch() -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(VOCAB, (ROWS, LENGTH + 1), generator=torch.Generator().manual_seed(4))
    return tokens[:, :-1], tokens[:, 1:]


def full_kernel(q, k, v):
    """The reference: every position against every key of its own document, causally."""
    pos = torch.arange(LENGTH)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=document_mask(pos, pos))


def gathered_kernel(q, k, v, group, rank: int):
    """The fix: all-gather K and V over the CP group, mask by document for MY positions.
    Backward: the gathered K / V gradients are reduce-scattered back (gather_from_sequence)."""
    B, H, Tc, hd = q.shape
    k_all, v_all = (
        gather_from_sequence(t.transpose(1, 2).reshape(B, Tc, H * hd), group)
        .view(B, -1, H, hd)
        .transpose(1, 2)
        for t in (k, v)
    )  # (B, H, T, hd)
    rows = torch.arange(rank * Tc, (rank + 1) * Tc)
    return F.scaled_dot_product_attention(
        q, k_all, v_all, attn_mask=document_mask(rows, torch.arange(LENGTH))
    )


def cp_reference(rec: Recorder) -> None:
    model = PackedLM(full_kernel).double()
    rec.watch(model)
    x, y = packed_batch()
    loss = lm_loss(model(x), y)
    rec.loss(loss)
    loss.backward()
    rec.grads(model)


def cp_step(env: RankEnv, rec: Recorder, document_aware: bool) -> None:
    group = env.group((CP,))
    kernel = (
        partial(gathered_kernel, group=group, rank=env.rank)
        if document_aware
        else partial(ring_attention, group=group, causal=True)
    )  # the bug: causal only
    model = PackedLM(kernel)
    rec.watch(model, Layout(CP, (Shard(1),)))  # every activation: (B, T/N, ...) chunks
    x, y = (t.chunk(WORLD, dim=1)[env.rank] for t in packed_batch())
    loss = lm_loss(model(x), y)
    rec.loss(loss, Layout(CP, (Partial("avg"),)))
    loss.backward()
    all_reduce_flat([p.grad for p in model.parameters()], dist.ReduceOp.AVG, group)
    rec.grads(model, replicated(CP))


def cases() -> list[tuple[str, str, str, Case, Case]]:
    cp = partial(
        Case,
        world_size=WORLD,
        reduction_size=ROWS * LENGTH + 6 * WIDTH + WORLD,
        reference=cp_reference,
    )
    return [
        (
            "cp_packed_docs",
            "axolotl-ai-cloud/axolotl#3608",
            "forward attn",
            cp(name="cp_packed_docs", step=partial(cp_step, document_aware=False)),
            cp(name="cp_packed_docs (fixed)", step=partial(cp_step, document_aware=True)),
        )
    ]
