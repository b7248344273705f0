"""A SIMULATED slow link: every collective in a block costs the alpha-beta time of a chosen link.

    from lab_utils.measure.simulated_link import simulated_link
    with simulated_link(alpha_s=100e-6, bandwidth_bytes_per_s=100e6) as link:
        ...                       # dist.all_reduce / all_gather / reduce_scatter / send / recv
    link.calls, link.slept_s      # collectives delayed, seconds slept (this rank)

After each real collective the rank sleeps ``calc.comm.collective_time(op, n, D, alpha, bw)``
(the ring alpha-beta model; D in calc.comm's convention: the all-reduce input, the all-gather
output, the reduce-scatter input, the sent tensor). The data is untouched; only the clock
changes. Lab 06 uses it to put a tensor-parallel group "across nodes". It is a measurement aid
(it observes the techniques from outside, by wrapping the ``dist`` functions for the duration of
the block), so it lives here and not beside the technique.
"""
from __future__ import annotations

import contextlib
import time
from typing import Iterator

import torch.distributed as dist

_SIMULATED_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather",
                  "reduce_scatter": "reduce_scatter", "send": "send_recv", "recv": "send_recv"}


def _full_bytes(name: str, args, kwargs) -> float:
    """D in lab_utils.calc.comm's convention: the all-reduce input, the all-gather OUTPUT, the
    reduce-scatter INPUT, the sent tensor."""
    first = args[0] if args else kwargs.get("tensor", kwargs.get("output"))
    if name == "all_gather":  # all_gather(tensor_list, tensor): the list is the gathered output
        return sum(t.numel() * t.element_size() for t in first)
    if name == "reduce_scatter":  # reduce_scatter(output, input_list)
        return sum(t.numel() * t.element_size() for t in args[1])
    return first.numel() * first.element_size()


class SimulatedLink:
    """Totals of a simulated_link block: collectives delayed and seconds slept (per rank)."""

    def __init__(self, alpha_s: float, bandwidth_bytes_per_s: float):
        self.alpha_s, self.bandwidth = alpha_s, bandwidth_bytes_per_s
        self.calls, self.slept_s = 0, 0.0


@contextlib.contextmanager
def simulated_link(alpha_s: float, bandwidth_bytes_per_s: float) -> Iterator[SimulatedLink]:
    """SIMULATION: every dist.all_reduce / all_gather / reduce_scatter / send / recv called in
    this block costs extra time, as if the ranks were joined by a link with latency ``alpha_s``
    and the given bandwidth (see the module docstring). Restores the dist functions on exit."""
    from lab_utils.calc.comm import collective_time

    link = SimulatedLink(alpha_s, bandwidth_bytes_per_s)
    originals = {name: getattr(dist, name) for name in _SIMULATED_OPS}

    def slowed(name, real):
        def call(*args, **kwargs):
            result = real(*args, **kwargs)
            n = dist.get_world_size(kwargs.get("group"))
            cost = collective_time(_SIMULATED_OPS[name], n, _full_bytes(name, args, kwargs),
                                   alpha_s, bandwidth_bytes_per_s)
            time.sleep(cost)
            link.calls, link.slept_s = link.calls + 1, link.slept_s + cost
            return result
        return call

    for name, real in originals.items():
        setattr(dist, name, slowed(name, real))
    try:
        yield link
    finally:
        for name, real in originals.items():
            setattr(dist, name, real)
