"""Activation checkpointing in segments: Chen et al. 2016's sqrt(n) rule (lab 02).

Chen, Xu, Zhang & Guestrin 2016, "Training Deep Nets with Sublinear Memory Cost", Sec. 4.1:
cut n layers into k segments and keep only each segment's INPUT during the forward pass. In
the backward pass one segment at a time is run forward again (its internals re-created),
then back-propagated and freed. With a = bytes of one layer's input and A = bytes one layer
saves for its backward (its internals):

    memory(k)    = k a  +  ceil(n / k) A     the k segment inputs + one live segment
    recompute    = n layer forwards          every segment is re-run once: ONE extra forward
    optimum      k* = sqrt(n A / a)          -> sqrt(n) segments when a = A: O(sqrt n) memory

With the backward costing two forwards, one extra forward is 1/3 more compute per step
(~33%), whatever k is: k only moves memory. k = 1 (one segment) holds everything during its
recompute; k = n keeps every layer's input. Lab 02 measures the curve with
``torch.utils.checkpoint`` (its k there is the number of BLOCKS PER segment, n / k here).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from lab_utils.calc._check import pos_int, pos_num


@dataclass(frozen=True)
class CheckpointPlan:
    """n layers in k segments: peak saved bytes (``memory``), layer forwards recomputed per
    step (``recompute_layers``) and that as a fraction of a step's compute
    (``extra_compute``, backward = 2 forwards)."""

    n_layers: int
    n_segments: int
    segment_layers: int
    memory: float
    memory_without: float
    recompute_layers: int
    extra_compute: float

    @property
    def saving(self) -> float:
        """memory_without / memory: how many times less is kept (>= 1 for a good k)."""
        return self.memory_without / self.memory


def checkpoint_segments(
    n_layers: int, n_segments: int, input_bytes: float = 1.0, layer_bytes: float = 1.0
) -> CheckpointPlan:
    """Memory and recomputation of checkpointing ``n_layers`` in ``n_segments`` segments.

    memory = k a + ceil(n/k) A; without checkpointing n A. Recompute: every segment's
    forward once, n layer forwards = one extra forward = 1/3 of a step (Chen et al. 2016,
    Sec. 4.1). Units of a and A are yours (bytes, or 1 = "one layer's worth"). Lab 02.
    """
    n, k = pos_int("n_layers", n_layers), pos_int("n_segments", n_segments)
    a, big_a = pos_num("input_bytes", input_bytes), pos_num("layer_bytes", layer_bytes)
    if k > n:
        raise ValueError(
            f"n_segments={k} exceeds n_layers={n}: a segment needs at least one "
            f"layer; use n_segments <= {n}"
        )
    seg = ceil(n / k)
    return CheckpointPlan(n, k, seg, k * a + seg * big_a, n * big_a, n, 1 / 3)


def optimal_segments(n_layers: int, input_bytes: float = 1.0, layer_bytes: float = 1.0) -> int:
    """The k that minimises ``checkpoint_segments(...).memory``: near sqrt(n A / a), i.e.
    sqrt(n) when a layer's input is as big as what it saves (Chen et al. 2016). Searched
    exactly among the integers around the continuous optimum (ties: fewer segments). Lab 02.
    """
    n = pos_int("n_layers", n_layers)
    a, big_a = pos_num("input_bytes", input_bytes), pos_num("layer_bytes", layer_bytes)
    if n > 10**12:
        raise ValueError(f"n_layers={n} is beyond any network (at most 10**12 layers)")
    # Within a run of k with the same ceil(n/k) = q the smallest k wins, so the optimum is
    # k = ceil(n/q) for some q. f(q) = ceil(n/q) a + q A lies within a of the smooth
    # g(q) = n a / q + q A, minimal at q* = sqrt(n a / A); g(q) - g(q*) = A (q - q*)^2 / q, so
    # only |q - q*| <= sqrt(q (a + A) / A) can win: scan that window exactly.
    q_star = (n * a / big_a) ** 0.5
    width = 2 * int(((q_star + 1) * (a + big_a) / big_a) ** 0.5) + 2
    lo, hi = max(1, int(q_star) - width), min(n, int(q_star) + width)
    ks = sorted({ceil(n / q) for q in range(lo, hi + 1)})
    return min(ks, key=lambda k: k * a + ceil(n / k) * big_a)
