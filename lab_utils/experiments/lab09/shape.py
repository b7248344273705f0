"""Lab 09's toy MoE: its shape and the synthetic data every rank can make for every rank.

MoEShape                       h = d_model, expert hidden, E experts, top-k, T tokens per rank
tokens_for(shape, source, step) the (T, h) tokens of data-parallel source ``source``
teacher(shape)                 the fixed (h, h) matrix of the regression target tanh(x A) / 2
probe_for(shape, source)       a fixed (T, h) direction: loss = sum(y * probe)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MoEShape:
    """The toy MoE of the lab: h = d_model, f = expert hidden, E experts, top-k, T tokens/rank."""

    d_model: int = 16
    d_hidden: int = 32
    n_experts: int = 8
    top_k: int = 2
    tokens: int = 24
    capacity_factor: float | None = 1.0
    skew: float = 1.0  # a shared offset in every token: the router starts unbalanced
    seed: int = 0


def tokens_for(shape: MoEShape, source: int, step: int = 0) -> torch.Tensor:
    """The (T, h) tokens of data-parallel source ``source`` at ``step`` (any rank can make any)."""
    g = torch.Generator().manual_seed(10_000 * step + source + 1)
    offset = torch.randn(shape.d_model, generator=torch.Generator().manual_seed(123))
    return shape.skew * offset + torch.randn(shape.tokens, shape.d_model, generator=g)


def teacher(shape: MoEShape) -> torch.Tensor:
    """A fixed (h, h) matrix: the regression target of the training runs is tanh(x A) / 2."""
    return torch.randn(shape.d_model, shape.d_model, generator=torch.Generator().manual_seed(5))


def probe_for(shape: MoEShape, source: int) -> torch.Tensor:
    """A fixed random (T, h) direction: loss = sum(y * probe), so every output element matters."""
    return torch.randn(
        shape.tokens, shape.d_model, generator=torch.Generator().manual_seed(777 + source)
    )
