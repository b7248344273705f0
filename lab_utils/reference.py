"""The single-process reference every parallel implementation is compared against.

One process, the GLOBAL batch, a plain optimizer: whatever DDP, ZeRO, TP or PP does, its losses
and final weights must match reference_run's (up to float rounding). The training step is split
into small named pieces so that parallel code can reuse them and insert its communication:

    optimizer.zero_grad()
    forward_backward(model, batch, loss_fn)   # grads are local here
    ... all-reduce / reduce-scatter the grads ...
    optimizer.step()
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lab_utils.models import lm_loss

Batch = tuple[torch.Tensor, torch.Tensor]  # (inputs, targets)
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def default_loss(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy for integer targets (next-token prediction), MSE for real-valued targets."""
    if targets.dtype == torch.long:
        return lm_loss(output, targets)
    return F.mse_loss(output, targets)


def make_optimizer(
    params: Iterable[nn.Parameter], name: str = "adamw", lr: float = 1e-2, weight_decay: float = 0.0
) -> torch.optim.Optimizer:
    """The optimizers the labs use. Reference and parallel runs must build theirs here.

    weight_decay defaults to 0 so a from-scratch Adam in the ZeRO lab has one thing less to get
    right; momentum-free SGD makes "update = -lr * grad" easy to check by hand.
    """
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; choose 'adamw' or 'sgd'")


def forward_backward(
    model: nn.Module, batch: Batch, loss_fn: LossFn = default_loss, grad_accum: int = 1
) -> float:
    """Accumulate d(mean loss)/d(params) into .grad; return the mean loss as a float.

    With grad_accum=K the batch is cut into K equal contiguous micro-batches and each micro-loss
    is divided by K: backward ADDS into .grad, so the K partial gradients sum to the gradient of
    the full-batch mean (the same numbers as K=1, up to rounding) at 1/K of the activation memory.
    """
    inputs, targets = batch
    if inputs.shape[0] % grad_accum != 0:
        raise ValueError(
            f"batch of {inputs.shape[0]} rows cannot be cut into {grad_accum} equal micro-batches"
        )
    total = 0.0
    for x, y in zip(inputs.chunk(grad_accum), targets.chunk(grad_accum)):
        loss = loss_fn(model(x), y) / grad_accum  # without / K the effective lr is K times too big
        loss.backward()
        total += loss.item()
    return total


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    loss_fn: LossFn = default_loss,
    grad_accum: int = 1,
) -> float:
    """zero_grad -> forward_backward -> step, returning the step's mean loss."""
    optimizer.zero_grad(set_to_none=True)
    loss = forward_backward(model, batch, loss_fn, grad_accum)
    optimizer.step()
    return loss


@dataclass
class ReferenceRun:
    losses: list[float]  # one per optimizer step, measured before that step's update
    state_dict: dict[str, torch.Tensor]  # final weights (detached copies)


def reference_run(
    model_fn: Callable[[], nn.Module],
    batches: Sequence[Batch],
    steps: int,
    lr: float = 1e-2,
    optimizer: str = "adamw",
    grad_accum: int = 1,
    loss_fn: LossFn = default_loss,
    seed: int = 0,
) -> ReferenceRun:
    """Train model_fn() in this process for `steps` steps on the GLOBAL batches.

    Step i uses batches[i % len(batches)], so a handful of batches can drive a longer run.
    Deterministic: the global RNG (used only by dropout) is seeded with `seed` inside a fork_rng
    block, so two calls give bitwise-equal losses and the caller's RNG state is left untouched.
    """
    if not batches:
        raise ValueError("batches is empty")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_fn()
        opt = make_optimizer(model.parameters(), optimizer, lr)
        losses = [
            train_step(model, opt, batches[i % len(batches)], loss_fn, grad_accum)
            for i in range(steps)
        ]
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return ReferenceRun(losses, state)


def reference_losses(*args: Any, **kwargs: Any) -> list[float]:
    """The per-step losses of ``reference_run`` (same arguments): ``reference_run(...).losses``."""
    return reference_run(*args, **kwargs).losses
