"""Compute spans of chosen modules, observed from outside with module and tensor hooks (lab 05).

    spans = ModuleSpans({"L0": model.blocks[0], "L1": model.blocks[1]}, Timeline(ctx))
    loss.backward()...            # forward / backward spans land in the timeline, mb=<name>
    spans.remove()

A forward span runs from the module's forward pre-hook to its forward hook. A backward span
runs from the moment the gradient of the module's output is ready (a hook on the output
tensor) to the moment the gradient of its input is (a hook on a view of the input); a module
whose input needs no gradient (the first layer, reading token ids) gets no backward span.
Hooks run in the order they were registered, so build ModuleSpans AFTER the technique under
observation (e.g. FSDP) has registered its own: a span then starts once the technique's
pre-hook (an all-gather) has finished, and ``on_start`` sees the memory as the module computes.
Communication spans come from ``CommLedger`` records (start_s, duration_s) on the same clock.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn


class ModuleSpans:
    """Records 'forward' / 'backward' spans of each named module into ``timeline``."""

    def __init__(
        self,
        modules: dict[str, nn.Module],
        timeline: Any,
        on_start: Callable[[str, str], None] | None = None,
    ) -> None:
        self.timeline, self.on_start = timeline, on_start
        self._open: dict[tuple[str, str], float] = {}
        self._handles = []
        for name, module in modules.items():
            self._handles.append(
                module.register_forward_pre_hook(
                    lambda _m, args, name=name: self._forward_start(name, args)
                )
            )
            self._handles.append(
                module.register_forward_hook(
                    lambda _m, _a, out, name=name: self._forward_end(name, out)
                )
            )

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _start(self, name: str, which: str) -> None:
        self._open[(name, which)] = self.timeline.now()
        if self.on_start is not None:
            self.on_start(name, which)

    def _end(self, name: str, which: str) -> None:
        start = self._open.pop((name, which), None)
        if start is not None:
            self.timeline.add(which, start, self.timeline.now(), mb=name, phase=which[:3])

    def _forward_start(self, name: str, args: tuple) -> tuple:
        self._start(name, "forward")
        if not torch.is_grad_enabled():
            return args
        # The module reads a fresh view of each input: its gradient is ready the moment this
        # module's backward ends, before any hook on the input itself (e.g. the previous
        # unit's all-gather) runs.
        args = tuple(a.view_as(a) if _tensors(a) else a for a in args)
        for t in _tensors(args):
            t.register_hook(lambda _g, name=name: self._end(name, "backward"))
        return args

    def _forward_end(self, name: str, out: Any) -> None:
        self._end(name, "forward")
        if torch.is_grad_enabled():
            for t in _tensors(out)[:1]:  # one output is enough to see the backward begin
                t.register_hook(lambda _g, name=name: self._start(name, "backward"))


def _tensors(value: Any) -> list[torch.Tensor]:
    items = value if isinstance(value, (tuple, list)) else [value]
    return [t for t in items if isinstance(t, torch.Tensor) and t.requires_grad]
