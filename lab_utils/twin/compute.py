"""Emulated compute: FLOPs really executed, counted per op, charged at peak x efficiency.

A dispatch mode sees every aten op a rank runs (forward AND backward: autograd carries the mode
into the backward pass). Ops in ``torch.utils.flop_counter``'s registry (matmuls, attention,
convolutions) are counted with torch's own formulas (no per-layer formula of ours) and charged
``flops x scale.flops / (peak x efficiency)`` seconds on the compute stream (named "forward",
or "backward" inside autograd's backward pass); other ops cost
nothing (element-wise work is ignored, as in the 6N FLOPs rule). A c10d op that reaches the
dispatcher outside our backend is a collective the emulator does not model: it is reported once.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from lab_utils.twin.session import Session


def _name(func: Any) -> str:
    return func._overloadpacket.__name__


class ComputeCharge(TorchDispatchMode):
    """Charge this rank's clock for the FLOPs of every op it runs while active."""

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.flops = 0.0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        counter = flop_registry.get(packet)
        s = self.session
        if counter is not None:
            flops = counter(*args, **kwargs, out_val=out)
            self.flops += flops
            name = "backward" if torch._C._current_autograd_node() is not None else "forward"
            s.clock.compute(flops * s.scale.flops / s.cluster.rank_flops_per_s(s.rank), name, flops)
        elif func.namespace == "c10d" and not s.forwarding:
            s.report_unknown(f"c10d.{_name(func)}")
        return out
