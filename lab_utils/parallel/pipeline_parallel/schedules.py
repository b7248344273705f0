"""Pipeline schedules from send/recv: plain functions over StageWorkers (lab 07).

Each schedule is the ORDER in which one rank runs its operations; the p2p happens inside the
operations (``stage.StageWorker``: F receives from the previous stage and sends to the next,
B and W the other way). Every schedule gives the same gradients; they differ in idle time
(the bubble) and in how many micro-batches of activations a stage holds. p stages, m
micro-batches, t_f / t_b the forward / whole backward of one micro-batch on one stage, and for
zero-bubble t_b = T_B + T_W (input gradient B, weight gradient W). Idle per rank per step:

    gpipe           all F, then all B             (p-1)(t_f+t_b)       holds m       Huang 2019
    1f1b            warm-up, F/B pairs, cool-down (p-1)(t_f+t_b)       holds p - s   Narayanan 2021
    interleaved     v chunks per rank             (p-1)(t_f+t_b)/v     holds ~p(1+(p-1)/(pv))
                                                  at v times the p2p messages       Narayanan 2021
    zb-h1           1F1B with W deferred          (p-1)(t_f+T_B-T_W)   holds p       Qi 2023
    zb-h2           2x the warm-up forwards       (p-1)(t_f+T_B-2T_W)  holds 2p - 1  Qi 2023
                    (>= 0; in steady state, when consecutive steps overlap)

Communication: every schedule sends the same messages (one activation forward and one
gradient backward per micro-batch per stage boundary, 4bTC bytes each); interleaving has
v times more boundaries: 2 m (p v - 1) messages per step instead of 2 m (p - 1).
"""

from __future__ import annotations

from typing import Callable, Sequence

from lab_utils.parallel.pipeline_parallel.stage import StageWorker


def gpipe(w: StageWorker) -> None:
    """GPipe (Huang et al. 2019): all m forwards, then all m backwards. Holds m micro-batches."""
    for i in range(w.m):
        w.forward(i)
    for i in range(w.m):
        w.backward(i)


def one_f_one_b(w: StageWorker) -> None:
    """1F1B (PipeDream-flush; Narayanan et al. 2021 Sec. 2.2.1). Holds at most p - s."""
    p, s = w.n_stages, w.stage
    warmup = min(p - s - 1, w.m)  # the stages downstream must fill before a grad returns
    # warm-up: forwards only
    for i in range(warmup):
        w.forward(i)
    # steady state: one forward, one backward
    for j in range(w.m - warmup):
        w.forward(warmup + j)
        w.backward(j)
    # cool-down: the backwards still owed
    for j in range(w.m - warmup, w.m):
        w.backward(j)


def interleaved_1f1b(chunks: Sequence[StageWorker]) -> None:
    """Interleaved 1F1B (Narayanan et al. 2021 Sec. 2.2.2; Megatron-LM's order).

    This rank (pp position r of p) holds v model chunks: chunks[c] is stage c*p + r of p*v.
    Each operation is 1/v of a stage's, so fill and drain are v times shorter. Forwards go
    through the chunks in rounds of p micro-batches (micro-batches 0..p-1 on chunk 0, the same
    on chunk 1, ..., then p..2p-1 on chunk 0, ...); backwards the same with chunks reversed.
    Needs m % p == 0. Holds the most on rank 0: 2(p-1) + (v-1)p + 1 chunk activations.
    """
    v, p, r, m = len(chunks), chunks[0].n_stages // len(chunks), chunks[0].stage, chunks[0].m
    if m % p:
        raise ValueError(f"interleaved 1F1B needs m % p == 0, got m={m}, p={p}")
    total = m * v  # operations of each kind on this rank

    def unit(k: int, forward: bool) -> tuple[int, StageWorker]:
        """The k-th forward (or backward) of this rank: which micro-batch, on which chunk."""
        round_, rest = divmod(k, p * v)
        c = rest // p
        return round_ * p + rest % p, chunks[c if forward else v - 1 - c]

    def fwd(k: int) -> None:
        i, w = unit(k, True)
        w.forward(i)

    def bwd(k: int) -> None:
        i, w = unit(k, False)
        w.backward(i)

    # warm-up: 2 per stage still to fill downstream, plus one round per extra chunk
    warmup = total if m == p else min(2 * (p - r - 1) + (v - 1) * p, total)
    for k in range(warmup):
        fwd(k)
    # steady state: one forward, one backward
    for k in range(total - warmup):
        fwd(warmup + k)
        bwd(k)
    # cool-down
    for k in range(total - warmup, total):
        bwd(k)


def zero_bubble(w: StageWorker, k: int = 1) -> None:
    """ZB-H1 (k=1) and ZB-H2 (k=2) of Qi et al. 2023 (Sec. 3.1, handcrafted schedules).

    Round x of stage s runs F_x, then B_{x - k(p-1-s)}, then W_{x - k(p-1)}, skipping the
    indices outside 0..m-1: the B's trail the F's by k(p-1-s) micro-batches (1F1B's warm-up,
    doubled for k=2) and the W's trail by k(p-1) on every stage. So stage s does k(p-1-s)
    forwards alone (warm-up), then F+B rounds while its W's are deferred, then F+B+W rounds,
    then B+W and finally the W's left over (cool-down): the deferred W's fill the slots where
    1F1B waits for a gradient. A micro-batch is held from its F to its W: k(p-1) + 1 of them,
    p for ZB-H1 (1F1B's peak), 2p-1 for ZB-H2.
    """
    p, s, m = w.n_stages, w.stage, w.m
    lag_b, lag_w = k * (p - 1 - s), k * (p - 1)
    for x in range(m + lag_w):
        if x < m:
            w.forward(x)
        if 0 <= x - lag_b < m:
            w.backward_input(x - lag_b)  # B: the previous stage is waiting for it
        if 0 <= x - lag_w < m:
            w.backward_weight(x - lag_w)  # W: deferred, nobody waits for it


def zb_h1(w: StageWorker) -> None:
    """ZB-H1: 1F1B's memory (p micro-batches), idle (p-1)(t_f + T_B - T_W) (Qi et al. 2023)."""
    zero_bubble(w, k=1)


def zb_h2(w: StageWorker) -> None:
    """ZB-H2: 2p-1 micro-batches held, idle (p-1)(t_f + T_B - 2T_W) >= 0 (Qi et al. 2023)."""
    zero_bubble(w, k=2)


def parse_op(op: str) -> tuple[str, int, int]:
    """'F3' -> ('F', 3, 0); 'B3c1' -> ('B', 3, 1): kind, micro-batch, chunk (ValueError else)."""
    head, _, chunk = op.partition("c")
    if (
        len(head) < 2
        or head[0] not in "FBW"
        or not head[1:].isdigit()
        or (chunk and not chunk.isdigit())
        or (op.endswith("c"))
    ):
        raise ValueError(f"{op!r} is not an operation like 'F3', 'B3', 'W3' or 'F3c1'")
    return head[0], int(head[1:]), int(chunk or 0)


def from_order(chunks: StageWorker | Sequence[StageWorker], order: Sequence[str]) -> None:
    """Run an explicit order such as ["F0", "F1", "B0", "W0", ...] (the lab 07 exercises).
    "B" is the whole backward unless the order has W's (then B = input gradient only)."""
    chunks = [chunks] if isinstance(chunks, StageWorker) else list(chunks)
    split = any(op.startswith("W") for op in order)
    for op in order:
        kind, i, c = parse_op(op)
        w = chunks[c]
        {"F": w.forward, "B": w.backward_input if split else w.backward, "W": w.backward_weight}[
            kind
        ](i)


# name -> (schedule function, model chunks per rank, backward split into B and W?)
SCHEDULES: dict[str, tuple[Callable, int, bool]] = {
    "gpipe": (gpipe, 1, False),
    "1f1b": (one_f_one_b, 1, False),
    "interleaved": (interleaved_1f1b, 2, False),
    "zb-h1": (zb_h1, 1, True),
    "zb-h2": (zb_h2, 1, True),
}
