"""Activation memory of a transformer layer (labs 01, 02, 06, 07, 08).

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
Sec. 4 and Table 2. Notation: s sequence length, b micro-batch size, h hidden size, a heads,
t tensor-parallel size, L layers, p pipeline stages. Activations are 16-bit (2 bytes) and
dropout masks 1 byte, which is where the constants 34 and 5 come from (Sec. 4.1):
attention block 11sbh + 5as^2b, MLP 19sbh, two LayerNorms 4sbh.

The 34 assumes GPT-3's layer (multi-head attention, dropout, a 4h GeLU MLP). A Llama layer
(grouped-query attention: K and V smaller; SwiGLU: three h x f matrices; no dropout) keeps a
different constant, so for Llama shapes these figures are the GPT-3 convention applied to
their sizes, as the Ultra-Scale Playbook does too.

Units: BYTES (the formulas already count bytes: 2 per 16-bit value, 1 per mask entry).
Convert with ``units.GB`` (1e9) or ``units.GiB`` (2**30) and say which when printing.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import (
    boolean,
    choice,
    heads_and_tp,
    index,
    int_choice,
    pos_int,
    sequence_split,
)

RECOMPUTE = ("none", "selective", "full")


def activation_bytes_per_layer(
    seq_len: int,
    micro_batch: int,
    hidden: int,
    n_heads: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    flash_attention: bool = False,
) -> float:
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
    Megatron); Table 2 lists only 2sbh.

    ``flash_attention=True`` drops the same 5as/h term without recomputing anything else:
    FlashAttention (Dao et al. 2022) never stores the s x s score matrix, only O(s) softmax
    statistics per head (ignored here), and rebuilds the scores tile by tile in the backward.
    Then activations grow LINEARLY with s. With recompute='selective' the term is already gone.
    TP must divide the heads (each rank owns whole heads) and the heads the hidden size.
    Introduced in lab 01 (t=1), lab 02 (recompute), lab 06 (TP/SP).
    """
    s, b = pos_int("seq_len", seq_len), pos_int("micro_batch", micro_batch)
    h, a, t = pos_int("hidden", hidden), pos_int("n_heads", n_heads), pos_int("tp", tp)
    heads_and_tp(h, a, t)
    sp = boolean("sequence_parallel", sequence_parallel)
    sequence_split(t, s, sp)
    choice("recompute", recompute, RECOMPUTE)
    flash = boolean("flash_attention", flash_attention)
    return _layer_bytes(s, b, h, a, t, sp, recompute, flash)


def _layer_bytes(
    s: int, b: int, h: int, a: int, t: int, sp: bool, recompute: str, flash: bool = False
) -> float:
    """The Table 2 formula on checked inputs (the planner also prices layouts whose TP does
    not divide the heads, to report them as infeasible with a memory figure)."""
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sp else 1)
    attn_scores = 0.0 if recompute == "selective" or flash else 5 * a * s / (h * t)
    if sp:
        return sbh * (34 / t + attn_scores)
    return sbh * (10 + 24 / t + attn_scores)


def embedding_activation_bytes(
    seq_len: int, micro_batch: int, hidden: int, tp: int = 1, sequence_parallel: bool = False
) -> float:
    """Bytes the embedding layer keeps for the backward pass per micro-batch: its dropout
    mask, s b h bytes (1 byte per element), sharded by t with sequence parallelism.

    Korthikanti et al. 2022 Sec. 4.3 count it (s b h p / t on the first stage, which holds p
    micro-batches); the Ultra-Scale Playbook's per-model activation totals include it (one
    s b h on top of L layers). Our per-layer figures leave it out, so ``activation_memory``
    adds it only with ``embedding=True``. Lab 01 (memory anatomy), lab 07.
    """
    s, b = pos_int("seq_len", seq_len), pos_int("micro_batch", micro_batch)
    h, t = pos_int("hidden", hidden), pos_int("tp", tp)
    sp = boolean("sequence_parallel", sequence_parallel)
    sequence_split(t, s, sp)
    return s * b * h / (t if sp else 1)


def logits_bytes(
    seq_len: int, micro_batch: int, vocab_size: int, tp: int = 1, bytes_per_value: int = 4
) -> float:
    """Bytes of the output layer's logits for one micro-batch: s b V values, each
    ``bytes_per_value`` (4: the loss is usually computed in fp32), divided by t when the output
    layer is vocab-parallel (lab 06).

    One value per vocabulary entry per token: with V = 128256 (Llama 3) that is 31x the hidden
    size 4096, so this one tensor (and its gradient, the same size) can rival a whole layer's
    activations. The planner adds it on the last pipeline stage. Lab 01, lab 06.
    """
    s, b = pos_int("seq_len", seq_len), pos_int("micro_batch", micro_batch)
    v, t = pos_int("vocab_size", vocab_size), pos_int("tp", tp)
    nbytes = int_choice("bytes_per_value", bytes_per_value, (1, 2, 4, 8), "bytes of one value")
    return s * b * v * nbytes / t


def in_flight_microbatches(schedule: str, pp: int, n_micro: int, stage: int = 0) -> int:
    """Micro-batches whose activations a pipeline stage holds at its peak.

    GPipe: all m (every forward finishes before any backward; Huang et al. 2019).
    1F1B: stage s (0-based) holds min(p - s, m): the first stage holds p, the last holds 1
    (Narayanan et al. 2021 Sec. 2.2.1; Korthikanti et al. 2022 Sec. 4). So PP does NOT
    divide the first stage's activation memory by p. The other schedules (interleaved,
    zero-bubble) are in ``calc.pipeline.peak_in_flight``. Lab 07.
    """
    from lab_utils.calc.pipeline import peak_in_flight

    choice("schedule", schedule, ("gpipe", "1f1b"))
    p, m = pos_int("pp", pp), pos_int("n_micro", n_micro)
    index("stage", stage, p, f"pp={p}")
    return int(peak_in_flight(schedule, p, m, stage))


@dataclass(frozen=True)
class ActivationMemory:
    """Activation bytes on one pipeline stage: ``per_layer`` x ``layers`` x ``in_flight``
    (times the interleaving factor), plus ``embedding`` (0 unless asked for, first stage
    only). ``total`` is what the stage holds at its peak."""

    per_layer: float
    layers: int
    in_flight: int
    interleave_factor: float
    embedding: float = 0.0

    @property
    def total(self) -> float:
        return (
            self.per_layer * self.layers * self.in_flight * self.interleave_factor + self.embedding
        )


def activation_memory(
    seq_len: int,
    micro_batch: int,
    hidden: int,
    n_heads: int,
    n_layers: int,
    tp: int = 1,
    pp: int = 1,
    n_micro: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    schedule: str = "1f1b",
    stage: int = 0,
    virtual_stages: int = 1,
    flash_attention: bool = False,
    embedding: bool = False,
) -> ActivationMemory:
    """Peak activation bytes on one rank of pipeline stage ``stage``.

    total = per_layer(s, b, h, a, t) * (L / p) * in_flight(stage) [* interleave factor]
            [+ embedding dropout mask s b h (/ t with SP) * in_flight, first stage only]

    With 1F1B and m >= p the first stage holds p micro-batches of L/p layers, i.e. the same
    as ALL L layers of one micro-batch (Korthikanti et al. 2022 Sec. 4, total activation
    memory). With ``virtual_stages`` v > 1 (interleaved 1F1B) stage s holds what
    ``calc.pipeline.peak_in_flight('interleaved', ...)`` says: the factor is that over the
    1F1B count, 1 + (p-1)/(p v) on the first stage (same section) and MORE on later stages.
    ``embedding=False`` (default, Korthikanti's per-layer view) leaves out the embedding's
    activations; ``embedding=True`` adds them as the Ultra-Scale Playbook's totals do
    (``embedding_activation_bytes``). Output-layer activations (logits) are not included.
    Lab 07 (first-stage memory), lab 08 (planner).
    """
    from lab_utils.calc.pipeline import peak_in_flight

    per_layer = activation_bytes_per_layer(
        seq_len, micro_batch, hidden, n_heads, tp, sequence_parallel, recompute, flash_attention
    )
    L, p = pos_int("n_layers", n_layers), pos_int("pp", pp)
    v = pos_int("virtual_stages", virtual_stages)
    with_embedding = boolean("embedding", embedding)
    if L % p:
        raise ValueError(f"pp={p} must divide n_layers={L} so every stage gets whole layers")
    flight = in_flight_microbatches(schedule, p, n_micro, stage)
    factor = 1.0
    if v > 1:
        if schedule != "1f1b":
            raise ValueError(
                "virtual_stages > 1 means the interleaved 1F1B schedule; use "
                "schedule='1f1b' with it, or virtual_stages=1 for GPipe"
            )
        if L % (p * v):
            raise ValueError(
                f"pp*virtual_stages = {p * v} must divide n_layers={L} so every "
                "model chunk gets whole layers"
            )
        factor = peak_in_flight("interleaved", p, n_micro, stage, v) / flight
    emb = 0.0
    if with_embedding and stage == 0:
        emb = (
            embedding_activation_bytes(seq_len, micro_batch, hidden, tp, sequence_parallel)
            * flight
            * factor
        )
    return ActivationMemory(
        per_layer=per_layer,
        layers=L // p,
        in_flight=flight,
        interleave_factor=factor,
        embedding=emb,
    )
