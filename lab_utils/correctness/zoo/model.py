"""The zoo's tiny language model, its data, and the layouts every bug reuses (lab 14).

TinyLM: emb -> fc1 -> act -> fc2 -> drop -> head, (B, T) token ids -> (B, T, V) logits, small
enough that a 4-rank bisection of every bug runs in seconds, with every piece a real layout
can cut: fc1 / fc2 are the Megatron column / row pair, emb and head can be tied, stage 0 =
emb..act and stage 1 = fc2..head is a 2-stage pipeline. Dropout draws its mask from float32
uniforms, so the float64 reference draws the same mask from the same seed.
"""

from __future__ import annotations

import torch
from torch import nn

from lab_utils.correctness.layout import Layout, Partial, Shard, replicated

VOCAB, WIDTH, SEQ, ROWS = 16, 8, 8, 8  # vocab, model width, tokens per row, global rows
PAD = -100  # cross-entropy's ignore_index: padding positions carry no loss


class Dropout32(nn.Module):
    """Inverted dropout whose mask comes from float32 uniforms whatever the input's dtype."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        keep = torch.rand(x.shape, dtype=torch.float32) >= self.p
        return x * keep.to(x.dtype) / (1 - self.p)


class TinyLM(nn.Module):
    def __init__(self, tied: bool = False, p_drop: float = 0.0) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.fc1 = nn.Linear(WIDTH, 4 * WIDTH)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * WIDTH, WIDTH)
        self.drop = Dropout32(p_drop)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        if tied:
            self.head.weight = self.emb.weight  # one Parameter, two uses

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, V)
        return self.head(self.drop(self.fc2(self.act(self.fc1(self.emb(idx))))))


def make_model(dtype: torch.dtype = torch.float32, **kwargs) -> TinyLM:
    """The same initial weights on every rank and in the reference (the caller seeds)."""
    return TinyLM(**kwargs).to(dtype)


def batch(rows: int = ROWS, pad_seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) token ids, (rows, SEQ) each; targets are the inputs shifted by one.
    With ``pad_seed``, each row ends in a random run of PAD targets (uneven real lengths)."""
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(VOCAB, (rows, SEQ + 1), generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:].clone()
    if pad_seed is not None:
        lengths = torch.randint(
            1, SEQ + 1, (rows,), generator=torch.Generator().manual_seed(pad_seed)
        )
        y[torch.arange(SEQ) >= lengths[:, None]] = PAD  # row i keeps its first lengths[i]
    return x, y


def rows_of(t: torch.Tensor, index: int, parts: int) -> torch.Tensor:
    """Data-parallel shard ``index`` of ``parts``: consecutive rows (the layout's Shard(0))."""
    return t.chunk(parts)[index]


def dp_layouts(ranks: tuple[int, ...]) -> tuple[Layout, Layout, Layout]:
    """(activations, loss, gradients) of plain data parallelism over ``ranks``: rows sharded,
    the loss a mean of the ranks' means, every gradient a replica."""
    return Layout(ranks, (Shard(0),)), Layout(ranks, (Partial("avg"),)), replicated(ranks)


def reduction_size(world_size: int) -> int:
    """n of the bound (compare.py): tokens into a weight gradient + fan-ins on the deepest
    path (emb 1, fc1 WIDTH, fc2 4 WIDTH, head WIDTH), with the ranks a reduction spans."""
    return ROWS * SEQ + 6 * WIDTH + world_size
