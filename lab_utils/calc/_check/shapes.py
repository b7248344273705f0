"""Rules BETWEEN inputs: divisibility against the model shape, parallel degrees that must
multiply to the GPU count, pipeline-schedule shapes. Callers check each value first
(``values``), then these."""

from __future__ import annotations

import math
from typing import Any

from lab_utils.calc._check.values import fields, pos_int, pos_num


def degrees_multiply(total_name: str, total: int, **degrees: int) -> None:
    """Parallel degrees must multiply to the GPU count (``tp * pp * dp == gpus``)."""
    product = math.prod(degrees.values())
    if product != total:
        names = "*".join(degrees)
        values = "*".join(map(str, degrees.values()))
        raise ValueError(
            f"{names} = {values} = {product} but {total_name}={total}: each GPU "
            f"holds exactly one position in the layout, so the degrees must "
            f"multiply to {total_name}"
        )


def at_most(small_name: str, small: int, big_name: str, big: int, why: str) -> None:
    """``small <= big`` (e.g. no more pipeline stages than layers)."""
    if small > big:
        raise ValueError(
            f"{small_name}={small} exceeds {big_name}={big}: {why}; use {small_name} <= {big}"
        )


def divides(small_name: str, small: int, big_name: str, big: int, why: str) -> None:
    """``small`` must divide ``big``; the message lists the divisors to choose from."""
    at_most(small_name, small, big_name, big, why)
    if big % small:
        divs = [d for d in range(1, min(big, 10**6) + 1) if big % d == 0][:12]
        raise ValueError(
            f"{small_name}={small} does not divide {big_name}={big}: {why}; use "
            f"a divisor of {big} such as {', '.join(map(str, divs))}"
        )


def heads_and_tp(hidden: int, n_heads: int, tp: int, n_kv_heads: int | None = None) -> None:
    """Tensor parallelism splits attention by heads: heads | hidden, tp | heads (Megatron,
    Shoeybi et al. 2019) and, with grouped-query attention, tp | K/V heads."""
    divides("n_heads", n_heads, "hidden", hidden, "each head gets hidden/n_heads dimensions")
    divides(
        "tp", tp, "n_heads", n_heads, "each tensor-parallel rank must own whole attention heads"
    )
    if n_kv_heads is not None:
        divides(
            "tp",
            tp,
            "n_kv_heads",
            n_kv_heads,
            "with grouped-query attention each tensor-parallel rank must own whole "
            "key/value heads (Megatron-LM requires n_kv_heads % tp == 0)",
        )


def megatron_run(record: Any) -> None:
    """A published Megatron-LM run (``n_heads, hidden, n_layers, tp, pp, n_gpus, batch``):
    whole positive sizes, tp | heads | hidden, pp <= layers, tp * pp | GPUs (the rest is DP)."""
    fields(record, pos_int, ("n_heads", "hidden", "n_layers", "tp", "pp", "n_gpus", "batch"))
    heads_and_tp(record.hidden, record.n_heads, record.tp)
    at_most("pp", record.pp, "n_layers", record.n_layers, "every stage needs a layer")
    divides(
        "tp*pp",
        record.tp * record.pp,
        "n_gpus",
        record.n_gpus,
        "the GPUs form data-parallel copies of one tp x pp model",
    )


def sequence_split(tp: int, seq_len: int, sequence_parallel: bool) -> None:
    """Sequence parallelism gives each of the tp ranks seq_len / tp positions of the
    activations outside attention and the MLP (Korthikanti et al. 2022): tp | seq_len."""
    if sequence_parallel:
        divides(
            "tp",
            tp,
            "seq_len",
            seq_len,
            "sequence parallelism splits the sequence evenly over the tensor-parallel ranks",
        )


def backward_split(t_b: float, t_w: float | None) -> float:
    """T_W of a zero-bubble pipeline schedule: ``t_w`` checked against ``t_b`` (default t_b / 2)."""
    t_w = t_b / 2 if t_w is None else pos_num("t_w", t_w)
    if not t_w < t_b:
        raise ValueError(
            f"t_w={t_w} must be smaller than t_b={t_b}: t_b is the whole backward, "
            "t_w its weight-gradient part"
        )
    return t_w


def interleaved_shape(p: int, m: int, v: int) -> None:
    """Megatron's interleaved schedule needs m % p == 0 and v >= 2 chunks per rank."""
    if m % p:
        raise ValueError(
            f"the interleaved schedule needs the number of micro-batches m={m} to "
            f"be a multiple of p={p} (Narayanan et al. 2021); use m = "
            f"{(m // p + 1) * p} or another multiple of {p}"
        )
    if v < 2:
        raise ValueError(
            "the interleaved schedule needs v >= 2 model chunks per rank "
            "(v=1 is plain 1F1B: use schedule '1f1b')"
        )


def one_chunk(v: int) -> None:
    """Only the interleaved schedule places v > 1 model chunks on a rank."""
    if v != 1:
        raise ValueError(f"v={v} model chunks only applies to the 'interleaved' schedule; use v=1")
