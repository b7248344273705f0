"""Communication volume and time of collectives (labs 03, 04, 05, 06, 07, 08).

Conventions:
* ``size_bytes`` (D) is the size of the FULL buffer: the all-reduce input, the reduce-scatter
  input, the all-gather output, one rank's whole all-to-all send buffer.
* "bytes per rank" counts what one rank SENDS (it receives the same amount in a ring).
* alpha-beta model (Hockney): sending m bytes costs alpha + m * beta, beta = 1 / bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from lab_utils.calc._check import (
    boolean,
    byte_rate,
    choice,
    nonneg_num,
    pos_int,
    pos_num,
    sequence,
    sequence_split,
)
from lab_utils.calc._line_fit import line_fit

OPS = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "broadcast",
    "reduce",
    "all_to_all",
    "send_recv",
)


def ring_bytes_per_rank(op: str, n: int, size_bytes: float) -> float:
    """Bytes one rank sends for collective ``op`` over ``n`` ranks with the ring algorithm.

        all_reduce                 : 2 (n-1)/n D   (reduce-scatter then all-gather)
        reduce_scatter, all_gather : (n-1)/n D
        all_to_all                 : (n-1)/n D     (keeps its own 1/n)
        broadcast, reduce          : ~D            (pipelined ring: each rank forwards D once)
        send_recv                  : D

    The all-reduce factor tends to 2, independent of n: that is why rings scale in bandwidth.
    Source: Patarasuk & Yuan 2009 (bandwidth-optimal all-reduce); nccl-tests PERFORMANCE.md.
    Introduced in lab 03.
    """
    choice("op", op, OPS)
    n, d = pos_int("n", n), nonneg_num("size_bytes", size_bytes)
    if op == "send_recv":
        return d
    if n == 1:
        return 0.0  # a collective over one rank moves nothing
    if op == "all_reduce":
        return 2 * (n - 1) / n * d
    if op in ("broadcast", "reduce"):
        return d
    return (n - 1) / n * d


def _log2(n: int) -> int:
    # Recursive doubling/halving on a non-power of two needs one extra round.
    return math.ceil(math.log2(n)) if n > 1 else 0


def collective_time(
    op: str,
    n: int,
    size_bytes: float,
    alpha_s: float,
    bandwidth_bytes_per_s: float,
    algorithm: str = "ring",
) -> float:
    """Alpha-beta time (seconds) of ``op`` over ``n`` ranks; beta = 1/bandwidth.

    ring (what NCCL uses for large messages):
        all_reduce                  2(n-1) alpha + 2(n-1)/n D beta   <- latency LINEAR in n
        reduce_scatter/all_gather   (n-1) alpha +  (n-1)/n D beta
        all_to_all (pairwise)       (n-1) alpha +  (n-1)/n D beta
        broadcast/reduce (chain)    (n-1) alpha +  D beta          (pipelined, many chunks)
    tree (logarithmic algorithms, Thakur, Rabenseifner & Gropp 2005, "Optimization of
    Collective Communication Operations in MPICH", Sec. 4):
        all_reduce (Rabenseifner)   2 lg n alpha + 2(n-1)/n D beta   <- latency LOG in n
        reduce_scatter (rec. halving), all_gather (rec. doubling): lg n alpha + (n-1)/n D beta
        broadcast/reduce (binomial) lg n (alpha + D beta)
        all_to_all (Bruck)          lg n alpha + (lg n / 2) D beta
    send_recv is alpha + D beta for both. lg n is rounded up. Reduction arithmetic is ignored.
    Lab 03 compares ring vs tree latency as n grows.
    """
    choice("op", op, OPS)
    choice("algorithm", algorithm, ("ring", "tree"))
    n, d = pos_int("n", n), nonneg_num("size_bytes", size_bytes)
    a, beta = (
        nonneg_num("alpha_s", alpha_s),
        1 / byte_rate("bandwidth_bytes_per_s", bandwidth_bytes_per_s),
    )
    if op == "send_recv":
        return a + d * beta
    if n == 1:
        return 0.0
    frac = (n - 1) / n
    if algorithm == "ring":
        steps = {"all_reduce": 2 * (n - 1)}.get(op, n - 1)
        volume = ring_bytes_per_rank(op, n, d)
        return steps * a + volume * beta
    lg = _log2(n)
    if op == "all_reduce":
        return 2 * lg * a + 2 * frac * d * beta
    if op in ("reduce_scatter", "all_gather"):
        return lg * a + frac * d * beta
    if op in ("broadcast", "reduce"):
        return lg * (a + d * beta)
    return lg * a + lg / 2 * d * beta  # all_to_all, Bruck


def alg_bandwidth(size_bytes: float, time_s: float) -> float:
    """algbw = S / t (bytes/s), nccl-tests PERFORMANCE.md "Algorithm bandwidth". Lab 03."""
    return nonneg_num("size_bytes", size_bytes) / pos_num("time_s", time_s)


BUSBW_FACTOR_DOC = {
    "all_reduce": "2(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "all_gather": "(n-1)/n",
    "broadcast": "1",
    "reduce": "1",
    "all_to_all": "(n-1)/n",
    "send_recv": "1",
}


def busbw_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` on ``n`` ranks (nccl-tests PERFORMANCE.md, "Summary"):
    all_reduce 2(n-1)/n; reduce_scatter, all_gather, all_to_all (n-1)/n; broadcast, reduce 1.
    busbw is comparable with the hardware link speed whatever n is. Lab 03."""
    choice("op", op, OPS)
    n = pos_int("n", n)
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    return 1.0


def bus_bandwidth(op: str, n: int, algbw: float) -> float:
    """busbw = algbw * busbw_factor(op, n) (nccl-tests PERFORMANCE.md). Lab 03."""
    return nonneg_num("algbw", algbw) * busbw_factor(op, n)


DP_STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp")


def dp_bytes_per_rank(param_bytes: float, n: int, strategy: str = "ddp") -> float:
    """Bytes one data-parallel rank sends per optimizer step (gradients the size of params).

        ddp   : all-reduce(grads)                          2 (n-1)/n * P
        zero1 : reduce-scatter(grads) + all-gather(params) 2 (n-1)/n * P   (same as DDP)
        zero2 : same collectives as zero1                  2 (n-1)/n * P   (same as DDP)
        zero3 / fsdp: all-gather fwd + all-gather bwd + reduce-scatter  3 (n-1)/n * P (1.5x)

    Rajbhandari et al. 2020, Sec. 7 (communication analysis). ``param_bytes`` is the 16-bit
    parameter size (2 bytes x params on this rank). Lab 04 (DDP), lab 05 (ZeRO).
    """
    choice("strategy", strategy, DP_STRATEGIES)
    p, n = nonneg_num("param_bytes", param_bytes), pos_int("n", n)
    passes = 3 if strategy in ("zero3", "fsdp") else 2
    return passes * (n - 1) / n * p


@dataclass(frozen=True)
class TPLayerComm:
    """Tensor-parallel traffic of one transformer layer for one micro-batch, per rank.
    ``ops`` lists (collective, count); ``message_bytes`` is b*s*h*bytes_per_elem."""

    ops: tuple[tuple[str, int], ...]
    message_bytes: float
    bytes_per_rank: float


def tp_layer_comm(
    micro_batch: int,
    seq_len: int,
    hidden: int,
    tp: int,
    bytes_per_elem: int = 2,
    sequence_parallel: bool = False,
    backward: bool = True,
    recompute: str = "none",
) -> TPLayerComm:
    """Megatron TP traffic per layer (Shoeybi et al. 2019, Sec. 3, Fig. 4).

    Forward: one all-reduce after attention and one after the MLP (row-parallel outputs),
    each of b*s*h elements; backward: two more (column-parallel input gradients). Full
    recomputation replays the forward, adding two more. With sequence parallelism each
    all-reduce becomes a reduce-scatter + an all-gather (Korthikanti et al. 2022, Sec. 4.2):
    same bytes, but activations between them stay sharded. Per rank each all-reduce sends
    2 (t-1)/t * b s h * bytes. Lab 06.
    """
    b, s, h, t = (
        pos_int("micro_batch", micro_batch),
        pos_int("seq_len", seq_len),
        pos_int("hidden", hidden),
        pos_int("tp", tp),
    )
    e = pos_int("bytes_per_elem", bytes_per_elem)
    sequence_parallel = boolean("sequence_parallel", sequence_parallel)
    sequence_split(t, s, sequence_parallel)
    backward = boolean("backward", backward)
    choice("recompute", recompute, ("none", "selective", "full"))
    n_ar = 2 + (2 if backward else 0) + (2 if backward and recompute == "full" else 0)
    msg = b * s * h * e
    if sequence_parallel:
        ops: tuple[tuple[str, int], ...] = (("all_gather", n_ar), ("reduce_scatter", n_ar))
    else:
        ops = (("all_reduce", n_ar),)
    return TPLayerComm(
        ops=ops, message_bytes=msg, bytes_per_rank=n_ar * ring_bytes_per_rank("all_reduce", t, msg)
    )


def pp_bytes_per_microbatch(
    micro_batch: int, seq_len: int, hidden: int, bytes_per_elem: int = 2
) -> float:
    """Bytes a pipeline stage sends to its neighbour per micro-batch: the b x s x h activation
    forward; the backward sends an activation gradient of the same size the other way.
    Narayanan et al. 2021, Sec. 2.2 (point-to-point between consecutive stages). Lab 07."""
    return float(
        pos_int("micro_batch", micro_batch)
        * pos_int("seq_len", seq_len)
        * pos_int("hidden", hidden)
        * pos_int("bytes_per_elem", bytes_per_elem)
    )


@dataclass(frozen=True)
class AlphaBetaFit:
    """t(D) = alpha + beta * D fitted by least squares; ``r2`` is the coefficient of
    determination; ``bandwidth`` = 1 / beta in bytes/s."""

    alpha_s: float
    beta_s_per_byte: float
    r2: float

    @property
    def bandwidth(self) -> float:
        return math.inf if self.beta_s_per_byte <= 0 else 1 / self.beta_s_per_byte


def fit_alpha_beta(sizes_bytes: Sequence[float], times_s: Sequence[float]) -> AlphaBetaFit:
    """Least-squares fit of measured times to t = alpha + beta * D (Hockney model).

    Use it on a sweep of message sizes (lab 03): alpha is the latency seen at small
    messages, 1/beta the bandwidth reached at large ones. Ordinary least squares, closed form.
    """
    xs = sequence(
        "sizes_bytes", sizes_bytes, lambda _, x: nonneg_num("each size in sizes_bytes", x)
    )
    ys = sequence("times_s", times_s, lambda _, y: nonneg_num("each time in times_s", y))
    if len(xs) != len(ys):
        raise ValueError(
            f"sizes_bytes has {len(xs)} values but times_s has {len(ys)}; "
            "pass one time per message size"
        )
    if len(xs) < 2:
        raise ValueError("need at least 2 (size, time) measurements to fit alpha and beta")
    if len(set(xs)) < 2:
        raise ValueError("all message sizes are equal; measure at least two different sizes")
    alpha, beta, r2 = line_fit(xs, ys)
    return AlphaBetaFit(alpha_s=alpha, beta_s_per_byte=beta, r2=r2)


def _links(intra_alpha_s: float, intra_bw: float, inter_alpha_s: float, inter_bw: float) -> None:
    """The two links' latencies (s, >= 0) and bandwidths (bytes/s, > 0), checked by name."""
    nonneg_num("intra_alpha_s", intra_alpha_s), nonneg_num("inter_alpha_s", inter_alpha_s)
    byte_rate("intra_bw", intra_bw), byte_rate("inter_bw", inter_bw)


def hierarchical_time(
    op: str,
    per_node: int,
    nodes: int,
    size_bytes: float,
    intra_alpha_s: float,
    intra_bw: float,
    inter_alpha_s: float,
    inter_bw: float,
) -> float:
    """Two-level ring time of ``op`` over ``per_node`` ranks on each of ``nodes`` nodes.

        all_reduce      reduce-scatter inside the node (D), all-reduce across nodes on D/k
                        (each GPU over its own NIC), all-gather inside the node (D)
        reduce_scatter  reduce-scatter inside (D), then across nodes on D/k
        all_gather      all-gather across nodes on D/k, then inside (D)
        broadcast/reduce  across nodes (D), then inside (D)
    all_to_all and send_recv have no two-level form here: the flat ring at the inter-node link.
    k = per_node. Each phase is ``collective_time`` (ring). Lab 03 (hierarchical vs flat).
    """
    choice("op", op, OPS)
    k, m = pos_int("per_node", per_node), pos_int("nodes", nodes)
    d = nonneg_num("size_bytes", size_bytes)
    _links(intra_alpha_s, intra_bw, inter_alpha_s, inter_bw)

    def intra(o: str, size: float) -> float:
        return collective_time(o, k, size, intra_alpha_s, intra_bw)

    def inter(o: str, size: float) -> float:
        return collective_time(o, m, size, inter_alpha_s, inter_bw)

    if op == "all_reduce":
        return intra("reduce_scatter", d) + inter("all_reduce", d / k) + intra("all_gather", d)
    if op == "reduce_scatter":
        return intra("reduce_scatter", d) + inter("reduce_scatter", d / k)
    if op == "all_gather":
        return inter("all_gather", d / k) + intra("all_gather", d)
    if op in ("broadcast", "reduce"):
        return inter(op, d) + intra(op, d)
    return collective_time(op, k * m, d, inter_alpha_s, inter_bw)


def group_collective_time(
    op: str,
    size: int,
    nodes: int,
    per_node: int,
    size_bytes: float,
    intra_alpha_s: float,
    intra_bw: float,
    inter_alpha_s: float,
    inter_bw: float,
) -> float:
    """Time of ``op`` on a group of ``size`` ranks spread over ``nodes`` nodes (at most
    ``per_node`` on one): inside one node, a ring on the intra-node link; one rank per node,
    a ring on the inter-node link; both, the faster of a flat ring at the inter-node link (its
    slowest hop) and ``hierarchical_time`` (as NCCL's tuner picks an algorithm). The emulated
    cluster (``lab_utils.twin``) charges every collective with it. Lab 03."""
    size, nodes, per_node = (
        pos_int("size", size),
        pos_int("nodes", nodes),
        pos_int("per_node", per_node),
    )
    _links(intra_alpha_s, intra_bw, inter_alpha_s, inter_bw)
    if nodes == 1:
        return collective_time(op, size, size_bytes, intra_alpha_s, intra_bw)
    flat = collective_time(op, size, size_bytes, inter_alpha_s, inter_bw)
    if per_node == 1:
        return flat
    return min(
        flat,
        hierarchical_time(
            op, per_node, nodes, size_bytes, intra_alpha_s, intra_bw, inter_alpha_s, inter_bw
        ),
    )
