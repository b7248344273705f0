"""Dropout under tensor parallelism: which random stream each dropout draws from (lab 06).

Megatron's rule (Shoeybi et al. 2019; megatron/core/tensor_parallel/random.py): where TP ranks
hold the SAME activations, dropout must draw the SAME mask (else the replicas silently
diverge); where each rank holds its OWN piece (its attention heads; with sequence parallelism its
sequence slice), masks must DIFFER per rank. The record/replay helpers rebuild the full-size
masks so an unsharded model can be checked against a TP one with dropout on.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.parallel.tensor_parallel.comm import all_gather_along


class TPRandom:
    """Megatron's model-parallel RNG tracker (megatron/core/tensor_parallel/random.py), on CPU.

    Two random streams per rank:
      * replicated stream = torch's default generator, seeded with the SAME seed on every TP rank
        (`seed_tensor_parallel`). Dropout where every rank holds the same activations (embedding,
        residual dropout without SP) must draw the same mask, or the "replicas" silently diverge.
      * sharded stream = this object's own state, seed + 2718 + tp_rank: DIFFERENT on every rank.
        Dropout on a rank's own piece (attention probabilities of its heads; with SP the residual
        dropout on its sequence slice) must differ per rank, or heads h and h + n_head/t get the
        same mask (correlated dropout: no error, just a worse regulariser).
    `fork()` swaps the sharded state in for the duration of a block, as Megatron's tracker does.
    """

    def __init__(
        self, seed: int, tp_rank: int, device: torch.device | str = "cpu", offset: int = 2718
    ):
        self.seed, self.device = seed + offset + tp_rank, torch.device(device)
        with self._fork_default():
            torch.manual_seed(self.seed)
            self._state = self._get()

    def _get(self) -> torch.Tensor:
        if self.device.type == "cuda":
            return torch.cuda.get_rng_state(self.device)
        return torch.get_rng_state()

    def _set(self, state: torch.Tensor) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_rng_state(state, self.device)
        else:
            torch.set_rng_state(state)

    def _fork_default(self):
        return torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else [])

    @contextlib.contextmanager
    def fork(self) -> Iterator[None]:
        outer = self._get()
        self._set(self._state)
        try:
            yield
        finally:
            self._state = self._get()
            self._set(outer)


def seed_tensor_parallel(seed: int, group, device: torch.device | str = "cpu") -> TPRandom:
    """Seed the replicated stream identically on every TP rank; return the sharded stream."""
    torch.manual_seed(seed)
    return TPRandom(seed, dist.get_rank(group), device)


class TPDropout(nn.Module):
    """Dropout that draws from the sharded stream when `rng` is given, else the replicated one.
    shard_dim is where a rank's piece sits in the full tensor (1 = heads or sequence), None when
    replicated. record=True keeps the last mask (for full_dropout_masks / the RNG drill)."""

    def __init__(self, p: float, rng: TPRandom | None = None, record: bool = False):
        super().__init__()
        self.p, self.rng, self.record = p, rng, record
        self.shard_dim = None if rng is None else 1
        self.last_mask: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        with self.rng.fork() if self.rng is not None else contextlib.nullcontext():
            out, mask = torch.native_dropout(x, self.p, True)  # mask: bool, 1 byte per element
        if self.record:
            self.last_mask = mask
        return out


def full_dropout_masks(model: nn.Module, group) -> dict[str, torch.Tensor]:
    """The last masks of every recording TPDropout, assembled to full size (a sharded mask is
    all-gathered along its shard_dim). Feed them to replay_dropout_masks on the unsharded model."""
    masks = {}
    for name, m in model.named_modules():
        if isinstance(m, TPDropout) and m.last_mask is not None:
            mask = m.last_mask
            if m.shard_dim is not None:
                mask = all_gather_along(mask.to(torch.uint8), m.shard_dim, group).bool()
            masks[name] = mask
    return masks


class _ReplayDropout(nn.Module):
    def __init__(self, mask: torch.Tensor, p: float):
        super().__init__()
        self.mask, self.p = mask, p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.mask / (1 - self.p)


def replay_dropout_masks(model: nn.Module, masks: dict[str, torch.Tensor]) -> nn.Module:
    """Replace the unsharded model's nn.Dropout modules named in `masks` by fixed-mask dropout,
    so it computes exactly what a TP model with those masks should compute."""
    for name, mask in masks.items():
        model.set_submodule(name, _ReplayDropout(mask, model.get_submodule(name).p))
    return model


def set_recording(model: nn.Module, on: bool = True) -> None:
    """Make every TPDropout keep (on=True) or drop its last mask."""
    for m in model.modules():
        if isinstance(m, TPDropout):
            m.record, m.last_mask = on, None
