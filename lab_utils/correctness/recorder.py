"""What one training step computed, tensor by tensor, in execution order (lab 14).

The same Recorder runs in the float64 single-process reference and on every rank:

    rec.watch(model, layout)     forward hooks: every submodule's output, by its name
                                 (the reference also notes the order gradients arrive in)
    rec.loss(loss, layout)       the loss the step back-propagates (summed over micro-batches)
    rec.grads(model, layout)     every parameter's .grad, after the gradient sync, before step()
    rec.value(name, t, layout)   anything else the step computes (a clipping norm, an aux loss)

``layout`` is a Layout, or a function name -> Layout for per-module layouts (TP's column and
row shards). A module run several times in a step (gradient accumulation: one call per
micro-batch) has its outputs concatenated along dim 0, the batch dim; a loss recorded several
times is summed. Events are keyed "forward NAME", "loss", "grad NAME", "value NAME".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Union

import torch
from torch import nn

from lab_utils.correctness.layout import Layout

LayoutFor = Union[Layout, Callable[[str], Layout]]
Rename = Callable[[str], Union[str, None]]


@dataclass
class Event:
    key: str  # "forward fc1", "loss", "grad fc1.weight", "value clip_grad_norm"
    tensor: torch.Tensor  # this rank's piece (detached, CPU)
    layout: Layout | None  # None in the reference (it holds the whole tensor)


def _renamed(name: str, rename: Rename | None) -> str | None:
    return rename(name) if rename is not None and name else name


def _layout(layout: LayoutFor | None, name: str) -> Layout | None:
    return layout(name) if callable(layout) else layout


def _first_tensor(out: Any) -> torch.Tensor | None:
    """A module's output, or the first tensor of a tuple or of a dataclass (MoEOutput.y)."""
    if dataclasses.is_dataclass(out):
        out = [getattr(out, f.name) for f in dataclasses.fields(out)]
    if isinstance(out, (tuple, list)):
        out = next((t for t in out if isinstance(t, torch.Tensor)), None)
    return out if isinstance(out, torch.Tensor) else None


class Recorder:
    """``reference=True`` (the bisector's single-process run) also notes the gradient order."""

    def __init__(self, reference: bool = False) -> None:
        self.reference = reference
        self.events: dict[str, Event] = {}  # insertion order = execution order
        self.grad_order: list[str] = []  # parameter names in the order backward produced them
        self._handles: list[Any] = []

    def _put(self, key: str, t: torch.Tensor, layout: Layout | None, repeat: str) -> None:
        t = t.detach().to("cpu", copy=True)
        old = self.events.get(key)
        if old is None:
            self.events[key] = Event(key, t, layout)
        elif repeat == "cat":
            old.tensor = torch.cat([old.tensor, t])
        elif repeat == "sum":
            old.tensor = old.tensor + t
        else:
            old.tensor = t

    def watch(
        self,
        model: nn.Module,
        layout: LayoutFor | None = None,
        prefix: str = "",
        rename: Rename | None = None,
    ) -> None:
        """Record every submodule's forward output (and the root's, named ``prefix`` without its
        dot, when a prefix is given); the reference also notes the order of the gradients.
        ``rename`` maps a name here to the reference's (an EP rank's local expert 0 is global
        expert 4), or to None to leave that module out."""
        for name, module in model.named_modules():
            full = _renamed(prefix + name if name else prefix.rstrip("."), rename)
            if full:  # the root only when prefixed
                self._handles.append(
                    module.register_forward_hook(
                        lambda _m, _a, out, key=f"forward {full}", n=full: self._forward(
                            key, out, _layout(layout, n)
                        )
                    )
                )
        for name, p in model.named_parameters() if self.reference else ():
            full = _renamed(prefix + name, rename)
            if p.requires_grad and full:
                self._handles.append(
                    p.register_post_accumulate_grad_hook(lambda _p, n=full: self._grad_arrived(n))
                )

    def _forward(self, key: str, out: Any, layout: Layout | None) -> None:
        t = _first_tensor(out)
        if t is not None:
            self._put(key, t, layout, "cat")

    def _grad_arrived(self, name: str) -> None:
        if name not in self.grad_order:
            self.grad_order.append(name)

    def loss(self, loss: torch.Tensor, layout: Layout | None = None) -> None:
        self._put("loss", loss, layout, "sum")

    def value(self, name: str, t: torch.Tensor, layout: Layout | None = None) -> None:
        self._put(f"value {name}", t, layout, "last")

    def grad(self, name: str, t: torch.Tensor, layout: Layout | None = None) -> None:
        self._put(f"grad {name}", t, layout, "last")

    def grads(
        self,
        model: nn.Module,
        layout: LayoutFor | None = None,
        prefix: str = "",
        rename: Rename | None = None,
    ) -> None:
        """Every parameter's .grad now, in the order backward produced them (where known)."""
        named = [
            (_renamed(prefix + n, rename), p)
            for n, p in model.named_parameters()
            if p.grad is not None
        ]
        rank = {n: i for i, n in enumerate(self.grad_order)}
        for name, p in sorted(
            ((n, p) for n, p in named if n), key=lambda np: rank.get(np[0], len(rank))
        ):
            self.grad(name, p.grad, _layout(layout, name))

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def pieces(self) -> dict[str, tuple[torch.Tensor, Layout | None]]:
        """What a rank sends back: key -> (its piece, its layout)."""
        return {k: (e.tensor, e.layout) for k, e in self.events.items()}
