"""Memory over one training step, measured event by event on any device (lab 01).

    points = record_steps(model, optimizer, batches, loss_fn, layers=[("block 0", blk), ...])
    [(p.step, p.phase, p.label, p.total) for p in points]

At every event of a training step we add up four kinds of bytes (each storage once):

    params       the parameters (fixed)
    grads        their ``.grad``: appear during backward, freed by ``zero_grad(set_to_none)``
    optimizer    the optimizer's state tensors (Adam m, v; an fp32 master copy): allocated by
                 the FIRST ``optimizer.step()``, then kept for the rest of training
    activations  tensors autograd saved for backward and still holds (``SavedActivations``):
                 they pile up during forward and are freed as backward consumes them

Events: the step begins; a forward hook after each layer in ``layers``; the loss; a
post-accumulate-grad hook each time a parameter's gradient is complete; the end of
backward; ``optimizer.step()``; ``zero_grad()``. What is NOT tracked: temporaries that live
inside one operation (backward's intermediate gradients, the allocator's cache), so a real
device's peak is somewhat higher. On CUDA, ``torch.cuda.memory._record_memory_history`` sees
everything; on CPU PyTorch keeps no allocator history, so we count the tensors we can name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch
from torch import nn

from lab_utils.measure.memory import SavedActivations, storage_bytes

PHASES = ("start", "forward", "backward", "optimizer", "zero_grad")


@dataclass(frozen=True)
class MemoryPoint:
    """Bytes held at one event of a training step."""

    step: int  # 1 for the first step
    phase: str  # one of PHASES
    label: str  # what just happened ("block 0", "grad head.weight", "optimizer.step()")
    params: int
    grads: int
    optimizer: int
    activations: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.activations


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """State tensors (0-dim step counters excluded), plus parameters the optimizer owns that
    the model does not (master weights) - ``model_state_bytes`` dedups against the model."""
    state = [
        v
        for s in optimizer.state.values()
        for v in s.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    ]
    own = [p for g in optimizer.param_groups for p in g["params"]]
    return own + state


def record_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    layers: Sequence[tuple[str, nn.Module]] | None = None,
    step_fn: Callable[[], None] | None = None,
) -> list[MemoryPoint]:
    """Run one training step per batch and return a ``MemoryPoint`` at every event.

    ``layers``: (name, module) pairs whose forward completion is an event (default: the
    model's direct children). ``step_fn``: what performs the update (default
    ``optimizer.step``; a master-weight wrapper passes its own step and its inner optimizer).
    """
    params = list(model.parameters())
    model_keys: set = set()
    p_bytes = storage_bytes(params, model_keys)  # fills model_keys with the params' storages
    points: list[MemoryPoint] = []
    step = 0
    acts: SavedActivations | None = None

    def snap(phase: str, label: str) -> None:
        grads = storage_bytes([p.grad for p in params if p.grad is not None], set(model_keys))
        opt = storage_bytes(_optimizer_tensors(optimizer), set(model_keys))
        live = acts.live_bytes if acts is not None else 0
        points.append(MemoryPoint(step, phase, label, p_bytes, grads, opt, live))

    layers = list(layers) if layers is not None else list(model.named_children())
    handles = [
        m.register_forward_hook(lambda mod, inp, out, name=name: snap("forward", name))
        for name, m in layers
    ]
    handles += [
        p.register_post_accumulate_grad_hook(lambda p, name=name: snap("backward", f"grad {name}"))
        for name, p in model.named_parameters()
    ]
    try:
        for x, y in batches:  # (not enumerate: its reused tuple would keep the batch)
            step, acts = step + 1, None
            snap("start", "step begins")
            with SavedActivations(model) as acts:
                loss = loss_fn(model(x), y)  # the logits are not kept: only the graph
            snap("forward", "loss")
            loss.backward()
            del loss, x, y  # the graph is gone; the batch too (the embedding saved it)
            snap("backward", "backward done")
            (step_fn or optimizer.step)()
            snap("optimizer", "optimizer.step()")
            optimizer.zero_grad(set_to_none=True)
            model.zero_grad(set_to_none=True)  # a wrapper's inner optimizer: model grads too
            snap("zero_grad", "zero_grad()")
    finally:
        for h in handles:
            h.remove()
    return points
