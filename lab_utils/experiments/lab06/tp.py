"""Lab 06's experiments: the rank workers the lab launches, each returning small dataclasses.

    tp_group(ctx, t)                      this rank's TP group of t consecutive ranks (Topology)
    split_demo(ctx, X, A)                 one matmul, column- and row-parallel, printed small
    check_blocks(ctx, cfg)                TPMLP, TPAttention, a whole TinyGPT vs unsharded, t=2, 4
    step_comm(ctx, cfg, batch)            one training step's collectives: ledger AND wire bytes
    activation_bytes(ctx, cfg, batch)     saved activations of one layer, TP with / without SP
    vocab_parallel(ctx, cfg, batch)       embeddings and loss split by vocabulary vs gathered

The drills (DTensor comparison, dropout seeding, slow link, thin matmuls) are in drills.py;
``unshard`` (a TP model's full weights or grads under the original names) in experiments.unshard.

Measurement stays outside the technique: CommLedger sees the collectives (formula bytes of what
was called), WireMeter what the kernel sent, SavedActivations what autograd kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lab_utils import calc
from lab_utils.data import token_batches
from lab_utils.experiments.unshard import unshard
from lab_utils.measure import CommLedger, SavedActivations, WireMeter
from lab_utils.models import GPTConfig, TinyGPT, lm_loss
from lab_utils.parallel.tensor_parallel import (
    TPMLP,
    ColumnParallelLinear,
    RowParallelLinear,
    TPAttention,
    seed_tensor_parallel,
    sync_sequence_parallel_grads,
    tensor_parallelize,
    vocab_parallel_cross_entropy,
)
from lab_utils.topology import Topology

OPS = ("all_reduce", "all_gather", "reduce_scatter")
PHASES = ("forward", "backward", "grad sync")


def tp_group(ctx: Any, t: int):
    """This rank's TP group: t consecutive ranks, from the course's one rank layout (every rank
    builds every group of every axis, as dist.new_group requires)."""
    return Topology(dp=ctx.world_size // t, tp=t).build_groups()["tp"]


def maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach() - b.detach()).abs().max().item()


# -- 1. one matmul, two splits -----------------------------------------------------------------


@dataclass
class SplitDemo:
    """What one rank holds: column-parallel A_i and Y_i = X A_i; row-parallel X_i, A_i, the
    partial X_i A_i before g's all-reduce and Y after it."""

    A_col: torch.Tensor
    Y_col: torch.Tensor
    X_row: torch.Tensor
    A_row: torch.Tensor
    partial: torch.Tensor
    Y_row: torch.Tensor


def split_demo(ctx: Any, X: torch.Tensor, A: torch.Tensor) -> SplitDemo:
    """Y = X A as a column-parallel and as a row-parallel linear over the whole world."""
    lin = nn.Linear(A.shape[0], A.shape[1], bias=False)
    with torch.no_grad():
        lin.weight.copy_(A.T)  # nn.Linear stores W = A^T: (out, in)
    col = ColumnParallelLinear(lin, ctx.group)  # my rows of W = my columns of A
    row = RowParallelLinear(lin, ctx.group)  # my columns of W = my rows of A
    x_mine = X.chunk(ctx.world_size, dim=1)[ctx.rank]  # row-parallel input: my input features
    with torch.no_grad():
        return SplitDemo(
            col.weight.T.clone(),
            col(X),
            x_mine,
            row.weight.T.clone(),
            x_mine @ row.weight.T,
            row(x_mine),
        )


# -- 2. the Megatron blocks against the unsharded ones ------------------------------------------


@dataclass
class BlockCheck:
    """Largest differences to the unsharded module: output (a loss for a whole model), input
    gradient (nan for a whole model) and every parameter gradient; shapes held by this rank."""

    t: int
    module: str
    out: float
    dx: float
    dW: float
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


def check_blocks(ctx: Any, cfg: GPTConfig, ts: tuple[int, ...] = (2, 4)) -> list[BlockCheck]:
    """TPMLP and TPAttention alone, then a whole tensor_parallelize'd TinyGPT, at each t."""
    rows = []
    for t in ts:
        group = tp_group(ctx, t)
        x = torch.randn(4, cfg.seq_len, cfg.d_model, generator=torch.Generator().manual_seed(0))
        for part, make in (("mlp", TPMLP), ("attn", TPAttention)):
            ref = getattr(TinyGPT(cfg, seed=0).blocks[0], part)
            sharded = make(getattr(TinyGPT(cfg, seed=0).blocks[0], part), group)
            xr, xs = x.clone().requires_grad_(), x.clone().requires_grad_()
            yr, ys = ref(xr), sharded(xs)  # (B, T, C) both
            yr.square().sum().backward()
            ys.square().sum().backward()
            full = unshard(sharded, grads=True)  # all-gathers: every rank calls
            rows.append(
                BlockCheck(
                    t,
                    part,
                    maxdiff(ys, yr),
                    maxdiff(xs.grad, xr.grad),
                    max(maxdiff(full[n], p.grad) for n, p in ref.named_parameters()),
                    {n: tuple(p.shape) for n, p in sharded.named_parameters()},
                )
            )
        ref, model = TinyGPT(cfg, seed=0), tensor_parallelize(TinyGPT(cfg, seed=0), group)
        idx, tgt = token_batches(1, 4, cfg.seq_len, cfg.vocab_size, seed=1)[0]
        lr, lt = lm_loss(ref(idx), tgt), lm_loss(model(idx), tgt)
        lr.backward()
        lt.backward()
        full = unshard(model, grads=True)
        rows.append(
            BlockCheck(
                t,
                "TinyGPT",
                abs(lt.item() - lr.item()),
                float("nan"),
                max(maxdiff(full[n], p.grad) for n, p in ref.named_parameters()),
            )
        )
    return rows


# -- 3. communication of one step: formula | ledger | wire -------------------------------------


@dataclass
class StepComm:
    """One training step (forward, backward, SP grad sync) of a TP TinyGPT on this rank:
    collectives called per (op, phase) and bytes sent per phase, by the ledger (ring formula on
    the sizes called) and by the wire (what gloo really sent, kernel-counted)."""

    t: int
    sp: bool
    calls: dict[str, dict[str, int]]  # phase -> op -> collectives called
    ledger: dict[str, float]
    wire: dict[str, int | None]


def step_comm(ctx: Any, cfg: GPTConfig, batch: int, ts: tuple[int, ...] = (2, 4)) -> list[StepComm]:
    """For each t and with / without sequence parallelism: one training step, measured."""
    idx, tgt = token_batches(1, batch, cfg.seq_len, cfg.vocab_size, seed=1)[0]
    out = []
    for t in ts:
        group = tp_group(ctx, t)
        for sp in (False, True):
            model = tensor_parallelize(TinyGPT(cfg, seed=0), group, sequence_parallel=sp)
            wire, ledger = {}, CommLedger()
            with ledger:
                for ph in PHASES:
                    with ledger.phase(ph), WireMeter(ctx) as meter:
                        if ph == "forward":
                            loss = lm_loss(model(idx), tgt)
                        elif ph == "backward":
                            loss.backward()
                        else:
                            sync_sequence_parallel_grads(model, group)
                    wire[ph] = meter.sent
            out.append(
                StepComm(
                    t,
                    sp,
                    _calls(ledger, PHASES),
                    {ph: ledger.bytes_sent(phase=ph) for ph in PHASES},
                    wire,
                )
            )
    return out


def _calls(ledger: CommLedger, phases: tuple[str, ...]) -> dict[str, dict[str, int]]:
    return {ph: {op: ledger.count(op, ph) for op in OPS} for ph in phases}


def comm_formula(t: int, sp: bool, batch: int, cfg: GPTConfig) -> dict[str, float]:
    """The papers' count per phase, bytes one rank sends (ring): 2 all-reduces of (b, s, h) per
    layer each way (Shoeybi et al. 2019); with SP each becomes a reduce-scatter + all-gather,
    "the same volume" (Korthikanti et al. 2022, Sec. 4.2.2). Nothing for the grad sync."""
    per = calc.tp_layer_comm(
        batch, cfg.seq_len, cfg.d_model, t, bytes_per_elem=4, sequence_parallel=sp
    )
    half = per.bytes_per_rank * cfg.n_layer / 2
    return {"forward": half, "backward": half, "grad sync": 0.0}


def sp_extras(t: int, batch: int, cfg: GPTConfig, sync_bytes: float) -> dict[str, float]:
    """What sequence parallelism sends beyond the formula, by phase (ledger - formula): in
    backward 2 re-gathers per layer (the column-parallel linears saved only their sequence
    shard of the input) and the all-gather before the first block; in forward the all-gather
    after the last block; the all-reduce of the LayerNorm / row-bias grads (sync_bytes, the
    grads' size)."""
    gather = calc.ring_bytes_per_rank("all_gather", t, batch * cfg.seq_len * cfg.d_model * 4)
    return {
        "forward": gather,
        "backward": (2 * cfg.n_layer + 1) * gather,
        "grad sync": calc.ring_bytes_per_rank("all_reduce", t, sync_bytes),
    }


def sp_sync_bytes(cfg: GPTConfig) -> int:
    """Bytes of the grads sync_sequence_parallel_grads all-reduces: per layer two LayerNorms
    (weight and bias) and two row-parallel biases, all of size h, fp32."""
    return cfg.n_layer * 6 * cfg.d_model * 4


def comm_rows(results: list[StepComm], batch: int, cfg: GPTConfig) -> list[dict]:
    """Rows for show_table: per (t, SP, phase) the calls, formula, ledger, wire and why they
    differ. gloo's reduce-scatter sends an all-reduce's bytes (measure/wire.py)."""
    rows = []
    for r in results:
        formula = comm_formula(r.t, r.sp, batch, cfg)
        extras = (
            sp_extras(r.t, batch, cfg, sp_sync_bytes(cfg)) if r.sp else dict.fromkeys(PHASES, 0.0)
        )
        for ph in PHASES:
            if not r.sp and ph == "grad sync":
                continue
            n_rs = r.calls[ph]["reduce_scatter"]
            rs_msg = batch * cfg.seq_len * cfg.d_model * 4
            gloo_rs = n_rs * calc.ring_bytes_per_rank("reduce_scatter", r.t, rs_msg)
            calls = ", ".join(f"{n} {op}" for op, n in r.calls[ph].items() if n)
            rows.append(
                {
                    "t": r.t,
                    "SP": "yes" if r.sp else "no",
                    "phase": ph,
                    "calls": calls,
                    "formula": round(formula[ph]),
                    "ledger": round(r.ledger[ph]),
                    "ledger - formula": round(r.ledger[ph] - formula[ph]),
                    "SP extras": round(extras[ph]),
                    "wire": r.wire[ph],
                    "wire - ledger": None
                    if r.wire[ph] is None
                    else round(r.wire[ph] - r.ledger[ph]),
                    "gloo RS excess": round(gloo_rs),
                }
            )
    return rows


# -- 3b. activation memory of one layer ----------------------------------------------------------


@dataclass
class ActivationBytes:
    """Bytes autograd saved for one layer's backward on this rank (bf16, dropout on)."""

    t: int
    sp: bool
    measured: int
    formula: float  # Korthikanti et al. 2022, Table 2 (calc.activation_bytes_per_layer)
    extras: int  # what the paper leaves out: LayerNorm mean and 1/std, the causal mask


def activation_extras(batch: int, seq: int, t: int, sp: bool) -> int:
    """Per layer: 2 LayerNorms x (mean, 1/std) per token of this rank's slice (bf16), plus the
    (s, s) bool causal mask."""
    return 2 * 2 * batch * (seq // (t if sp else 1)) * 2 + seq * seq


def activation_bytes(
    ctx: Any, cfg: GPTConfig, batch: int, ts: tuple[int, ...] = (1, 2, 4)
) -> list[ActivationBytes]:
    """One layer of a bf16 TinyGPT with dropout (the paper's 1-byte masks), per t, SP or not."""
    out = []
    for t in ts:
        group = tp_group(ctx, t)
        for sp in (False, True):
            model = TinyGPT(cfg, seed=0).to(torch.bfloat16)
            tensor_parallelize(
                model, group, sequence_parallel=sp, rng=seed_tensor_parallel(0, group)
            )  # dropout needs both streams
            x = torch.randn(
                batch, cfg.seq_len, cfg.d_model, dtype=torch.bfloat16, requires_grad=True
            )
            with SavedActivations(model.blocks[0]) as acts:  # SP: the block keeps its T/t slice
                y = model.blocks[0](x)
            y.float().sum().backward()
            formula = calc.activation_bytes_per_layer(
                cfg.seq_len, batch, cfg.d_model, cfg.n_head, t, sp
            )
            out.append(
                ActivationBytes(
                    t, sp, acts.bytes, formula, activation_extras(batch, cfg.seq_len, t, sp)
                )
            )
    return out


# -- 3c. embeddings and the loss under TP ------------------------------------------------------


@dataclass
class VocabRun:
    """One step of a TinyGPT whose embedding and head are split by vocabulary, with the loss on
    gathered logits ("gather") or on the split logits ("vocab-parallel CE")."""

    variant: str
    loss_err: float  # |loss - unsharded loss|
    grad_err: float  # max |grad - unsharded grad| over every parameter
    calls: dict[str, dict[str, int]]  # phase -> op -> collectives called
    ledger: dict[str, float]
    wire: dict[str, int | None]
    logits_bytes: int  # the logits this rank holds


def vocab_parallel(ctx: Any, cfg: GPTConfig, batch: int) -> list[VocabRun]:
    """tensor_parallelize(vocab_parallel=True) over the whole world, both ways of taking the
    loss, against the unsharded model."""
    idx, tgt = token_batches(1, batch, cfg.seq_len, cfg.vocab_size, seed=1)[0]
    ref = TinyGPT(cfg, seed=0)
    ref_loss = lm_loss(ref(idx), tgt)
    ref_loss.backward()
    out = []
    for variant, gather in (("gather logits", True), ("vocab-parallel CE", False)):
        model = tensor_parallelize(
            TinyGPT(cfg, seed=0), ctx.group, vocab_parallel=True, gather_logits=gather
        )
        ledger, wire = CommLedger(), {}
        with ledger:
            with ledger.phase("forward"), WireMeter(ctx) as meter:
                logits = model(idx)  # (B, T, V) gathered, or (B, T, V/t) this rank's slice
                loss = (
                    lm_loss(logits, tgt)
                    if gather
                    else vocab_parallel_cross_entropy(
                        logits.flatten(0, 1), tgt.flatten(), ctx.group
                    ).mean()
                )
            wire["forward"] = meter.sent
            with ledger.phase("backward"), WireMeter(ctx) as meter:
                loss.backward()
            wire["backward"] = meter.sent
        full = unshard(model, grads=True)
        out.append(
            VocabRun(
                variant,
                abs(loss.item() - ref_loss.item()),
                max(maxdiff(full[n], p.grad) for n, p in ref.named_parameters()),
                _calls(ledger, ("forward", "backward")),
                {ph: ledger.bytes_sent(phase=ph) for ph in ("forward", "backward")},
                wire,
                logits.numel() * logits.element_size(),
            )
        )
    return out
