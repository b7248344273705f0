"""Deterministic synthetic data: learnable in a few steps, identical on every rank.

Every function draws from a local torch.Generator seeded by `seed`, never the global RNG, so
each rank can regenerate the same GLOBAL batches and keep only its shard (`shard_for_rank`).
That is what lets a data-parallel run be compared step by step with one process training on the
whole global batch.
"""

from __future__ import annotations

import torch

Batch = tuple[torch.Tensor, torch.Tensor]  # (inputs, targets)


def token_batches(
    n_batches: int,
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    seed: int = 0,
    a: int = 5,
    b: int = 3,
    noise: float = 0.0,
) -> list[Batch]:
    """Next-token batches from the rule  next = (a * token + b) % vocab_size.

    Each sequence starts at a random token; with probability `noise` a token is replaced by a
    uniformly random one (the rule then continues from it). A model only has to learn a lookup
    table token -> next token, so the loss visibly drops within ~20 steps; noise sets a floor.
    Returns n_batches pairs (inputs, targets), both int64 (batch_size, seq_len), where
    targets[:, t] = sequence[:, t + 1].
    """
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise must be a probability in [0, 1], got {noise}")
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        seq = torch.empty(batch_size, seq_len + 1, dtype=torch.long)  # +1: the last target
        seq[:, 0] = torch.randint(vocab_size, (batch_size,), generator=g)
        for t in range(seq_len):
            nxt = (a * seq[:, t] + b) % vocab_size
            # Draw both every step (even at noise=0) so the stream of draws, and hence the
            # data, does not depend on whether a token happened to be replaced.
            random_tok = torch.randint(vocab_size, (batch_size,), generator=g)
            replace = torch.rand(batch_size, generator=g) < noise
            seq[:, t + 1] = torch.where(replace, random_tok, nxt)
        batches.append((seq[:, :-1].clone(), seq[:, 1:].clone()))
    return batches


def regression_batches(
    n_batches: int,
    batch_size: int,
    d_in: int = 16,
    d_out: int = 16,
    seed: int = 0,
    noise: float = 0.01,
) -> list[Batch]:
    """Regression batches from a fixed random "teacher": y = tanh(x @ W) + noise * eps.

    The teacher W (d_in, d_out) is drawn once from the seed, so all batches share one target
    function that a ToyMLP can fit. Returns float32 pairs x (batch_size, d_in) and
    y (batch_size, d_out).
    """
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(d_in, d_out, generator=g) / d_in**0.5  # keeps x @ W at unit scale
    batches = []
    for _ in range(n_batches):
        x = torch.randn(batch_size, d_in, generator=g)
        y = torch.tanh(x @ teacher) + noise * torch.randn(batch_size, d_out, generator=g)
        batches.append((x, y))
    return batches


def shard_for_rank(
    batch: torch.Tensor | tuple[torch.Tensor, ...], rank: int, world_size: int
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """This rank's contiguous slice (along dim 0) of a global batch, or of each tensor in a tuple.

    Rank r gets rows [r * B/W, (r + 1) * B/W). Equal shards make the mean of the per-rank mean
    losses equal the global mean loss, which is what DDP's gradient averaging assumes.
    """
    if isinstance(batch, torch.Tensor):
        return _shard(batch, rank, world_size)
    return tuple(_shard(t, rank, world_size) for t in batch)


def _shard(t: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")
    if t.shape[0] % world_size != 0:
        raise ValueError(
            f"global batch of {t.shape[0]} rows cannot be split evenly over {world_size} ranks; "
            "uneven shards would change the averaged gradient (and hang DDP at the end of an epoch)"
        )
    per_rank = t.shape[0] // world_size
    return t[rank * per_rank : (rank + 1) * per_rank]
