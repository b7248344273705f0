"""Activation memory of a transformer layer (labs 01, 02, 06, 07, 08).

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
Sec. 4 and Table 2. Notation: s sequence length, b micro-batch size, h hidden size, a heads,
t tensor-parallel size, L layers, p pipeline stages. Activations are 16-bit (2 bytes) and
dropout masks 1 byte, which is where the constants 34 and 5 come from (Sec. 4.1):
attention block 11sbh + 5as^2b, MLP 19sbh, two LayerNorms 4sbh.

Units: BYTES (the formulas already count bytes: 2 per 16-bit value, 1 per mask entry).
Convert with ``units.GB`` (1e9) or ``units.GiB`` (2**30) and say which when printing.
"""
from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import choice, pos_int

RECOMPUTE = ("none", "selective", "full")


def activation_bytes_per_layer(seq_len: int, micro_batch: int, hidden: int, n_heads: int,
                               tp: int = 1, sequence_parallel: bool = False,
                               recompute: str = "none") -> float:
    """Bytes of activations ONE transformer layer keeps for the backward pass, per rank.

    Korthikanti et al. 2022, Table 2 (per layer):
        no parallelism          : s b h (34 + 5 a s / h)
        tensor parallel (t)     : s b h (10 + 24/t + 5 a s / (h t))
        TP + sequence parallel  : s b h (34/t + 5 a s / (h t))
        TP + selective recompute: s b h (10 + 24/t)
        TP + SP + selective     : s b h (34/t)
        full recompute          : 2 s b h    (only the layer input is kept)

    The "10" is what TP alone leaves replicated: LayerNorm inputs and dropout masks (lab 06).
    Selective recomputation drops the 5as/h attention-score terms (softmax, dropout). For full
    recomputation with SP we divide the stored input by t (it is sequence-sharded, as in
    Megatron); Table 2 lists only 2sbh. Introduced in lab 01 (t=1), lab 02 (recompute),
    lab 06 (TP/SP).
    """
    s, b = pos_int("seq_len", seq_len), pos_int("micro_batch", micro_batch)
    h, a, t = pos_int("hidden", hidden), pos_int("n_heads", n_heads), pos_int("tp", tp)
    choice("recompute", recompute, RECOMPUTE)
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    attn_scores = 0.0 if recompute == "selective" else 5 * a * s / (h * t)
    if sequence_parallel:
        return sbh * (34 / t + attn_scores)
    return sbh * (10 + 24 / t + attn_scores)


def in_flight_microbatches(schedule: str, pp: int, n_micro: int, stage: int = 0) -> int:
    """Micro-batches whose activations a pipeline stage holds at its peak.

    GPipe: all m (every forward finishes before any backward; Huang et al. 2019).
    1F1B: stage s (0-based) holds min(p - s, m): the first stage holds p, the last holds 1
    (Narayanan et al. 2021 Sec. 2.2.1; Korthikanti et al. 2022 Sec. 4). So PP does NOT
    divide the first stage's activation memory by p. Lab 07.
    """
    choice("schedule", schedule, ("gpipe", "1f1b"))
    p, m = pos_int("pp", pp), pos_int("n_micro", n_micro)
    if not 0 <= stage < p:
        raise ValueError(f"stage must be in 0..{p - 1} for pp={p}, got {stage!r}")
    return m if schedule == "gpipe" else min(p - stage, m)


@dataclass(frozen=True)
class ActivationMemory:
    """Activation bytes on one pipeline stage: ``per_layer`` x ``layers`` x ``in_flight``
    (times the interleaving factor). ``total`` is what the stage holds at its peak."""

    per_layer: float
    layers: int
    in_flight: int
    interleave_factor: float

    @property
    def total(self) -> float:
        return self.per_layer * self.layers * self.in_flight * self.interleave_factor


def activation_memory(seq_len: int, micro_batch: int, hidden: int, n_heads: int,
                      n_layers: int, tp: int = 1, pp: int = 1, n_micro: int = 1,
                      sequence_parallel: bool = False, recompute: str = "none",
                      schedule: str = "1f1b", stage: int = 0,
                      virtual_stages: int = 1) -> ActivationMemory:
    """Peak activation bytes on one rank of pipeline stage ``stage``.

    total = per_layer(s, b, h, a, t) * (L / p) * in_flight(stage) [* (1 + (p-1)/(p v))]

    With 1F1B and m >= p the first stage holds p micro-batches of L/p layers, i.e. the same
    as ALL L layers of one micro-batch (Korthikanti et al. 2022 Sec. 4, total activation
    memory). The interleaved schedule with v chunks per rank multiplies this by
    1 + (p-1)/(p v) (same section). Ignores the embedding and output-layer activations, which
    that section shows are small next to L layers.
    Lab 07 (first-stage memory), lab 08 (planner).
    """
    per_layer = activation_bytes_per_layer(seq_len, micro_batch, hidden, n_heads, tp,
                                           sequence_parallel, recompute)
    L, p, v = pos_int("n_layers", n_layers), pos_int("pp", pp), pos_int("virtual_stages",
                                                                        virtual_stages)
    if L % p:
        raise ValueError(f"pp={p} must divide n_layers={L} so every stage gets whole layers")
    flight = in_flight_microbatches(schedule, p, n_micro, stage)
    factor = 1 + (p - 1) / (p * v) if v > 1 else 1.0
    return ActivationMemory(per_layer=per_layer, layers=L // p, in_flight=flight,
                            interleave_factor=factor)
