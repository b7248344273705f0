"""Data parallelism that talks less often: local SGD and DiLoCo (lab 04).

Each of K replicas takes H inner optimizer steps on its own data with NO communication, then
the replicas synchronise once:

    local SGD      average the parameters (Stich 2019, "Local SGD converges fast and
                   communicates little"; torch's PeriodicModelAverager does exactly this).
    DiLoCo         the inner optimizer is AdamW; at a sync the PSEUDO-GRADIENT
                   Delta = theta_global - mean_k(theta_k) (how far the replicas moved, averaged)
                   is handed to an OUTER optimizer, SGD with Nesterov momentum (lr 0.7, momentum
                   0.9 in Douillard et al. 2023, "DiLoCo: Distributed Low-Communication Training
                   of Language Models"), which updates theta_global; every replica restarts
                   from the new theta_global.

Local SGD is DiLoCo with an outer SGD of learning rate 1 and no momentum: theta_global - 1 *
Delta = mean_k(theta_k). Communication per rank: one all-reduce of the parameters every H
steps instead of one of the gradients every step, H times fewer bytes (in the same dtype), at
some cost in loss per step that lab 04 measures. The sync is one flat all-reduce (AVG).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.parallel.collectives import all_reduce_flat


class DiLoCo:
    """Wrap a model and its inner optimizer; call ``step()`` after each ``loss.backward()``.

        inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
        algo = DiLoCo(model, inner, every=8)                  # outer Nesterov SGD (0.7, 0.9)
        algo = DiLoCo(model, inner, every=8, outer_lr=1.0, outer_momentum=0.0)   # local SGD

    Every replica must start from the same parameters (build the model with the same seed).
    """

    def __init__(
        self,
        model: nn.Module,
        inner: torch.optim.Optimizer,
        every: int,
        outer_lr: float = 0.7,
        outer_momentum: float = 0.9,
        group: Any = None,
    ) -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(
                f"every={every!r}: the number of inner steps between syncs, an int >= 1"
            )
        if not outer_lr > 0 or not 0 <= outer_momentum < 1:
            raise ValueError(
                f"outer_lr={outer_lr} must be > 0 and outer_momentum={outer_momentum} in [0, 1)"
            )
        self.model, self.inner, self.every, self.group = model, inner, every, group
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.global_params = [nn.Parameter(p.detach().clone()) for p in self.params]
        self.outer = torch.optim.SGD(
            self.global_params, lr=outer_lr, momentum=outer_momentum, nesterov=outer_momentum > 0
        )
        self.inner_steps = 0

    def step(self) -> bool:
        """One inner step (no communication); every ``every`` steps, the outer step.
        Returns True when this step synchronised."""
        self.inner.step()
        self.inner.zero_grad()
        self.inner_steps += 1
        if self.inner_steps % self.every:
            return False
        self.sync()
        return True

    @torch.no_grad()
    def sync(self) -> None:
        """Average the pseudo-gradients over the replicas (one all-reduce), take the outer
        step on the global parameters, and restart every replica from them."""
        deltas = [g - p for g, p in zip(self.global_params, self.params)]
        all_reduce_flat(deltas, dist.ReduceOp.AVG, self.group)  # one all-reduce for all of them
        for g, d in zip(self.global_params, deltas):
            g.grad = d
        self.outer.step()
        self.outer.zero_grad()
        for p, g in zip(self.params, self.global_params):
            p.copy_(g)
