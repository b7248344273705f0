"""Lab 08's experiments on ranks: 2D (dp x tp) and 3D (dp x tp x pp) training of TinyGPT against
one process, each mesh axis's traffic by ledger AND wire, one rank's step traced.

    experiments_2d(ctx, steps, ...)   {variant: Run2D}: "torch" = compose.apply_tp + apply_fsdp
                                      (DTensor, FSDP2), "ours" = apply_tp_ours + sync_dp_grads
    train_3d(ctx, steps, m, mb, ...)  Run3D: 1F1B over pp (StageWorker), our TP in each stage,
                                      one gradient all-reduce over dp
    reference_grads(...)              the single-process gradients of the first step

Measurement stays outside the techniques: CommLedger sees the collectives (the ring formula on
the sizes called), WireMeter what each rank's sockets sent, to whom (so wire bytes are split by
axis: a peer in my tp group is tp traffic, and so on), StageWorker's observer names each op.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.data import shard_for_rank, token_batches
from lab_utils.experiments.unshard import unshard
from lab_utils.measure import CommLedger, WireMeter
from lab_utils.models import GPTConfig, TinyGPT, lm_loss, split_stages
from lab_utils.parallel.compose import apply_fsdp, apply_pp, apply_tp, apply_tp_ours, sync_dp_grads
from lab_utils.parallel.pipeline_parallel.schedules import one_f_one_b
from lab_utils.parallel.pipeline_parallel.stage import StageWorker, pipeline_neighbours
from lab_utils.reference import make_optimizer
from lab_utils.topology import Topology

CFG = GPTConfig(vocab_size=64, seq_len=16, n_layer=4, n_head=4, d_model=32)
LR = 1e-2
AXES = ("tp", "pp", "dp")
_TAGS = itertools.count(1)  # a fresh p2p tag base per pipeline step (same sequence on every rank)


@dataclass
class AxisComm:
    """One mesh axis, one optimizer step, this rank: calls and ledger bytes (ring formula on the
    sizes called) and wire bytes (sent to peers on this axis, kernel-counted; None if unknown)."""

    calls: int = 0
    ledger: float = 0.0
    ops: dict[str, int] = field(default_factory=dict)  # op -> calls
    op_bytes: dict[str, float] = field(default_factory=dict)  # op -> ledger bytes
    wire: int | None = None

    @property
    def headers(self) -> int | None:
        """wire - ledger - gloo's reduce-scatter excess (it sends an all-reduce's bytes): what
        is left is gloo's 48-byte header on every message."""
        if self.wire is None:
            return None
        return round(self.wire - self.ledger - self.op_bytes.get("reduce_scatter", 0.0))


def _axis_of(record: Any) -> str:
    """p2p -> pp; the "dp sync" phase and FSDP's all-gathers / reduce-scatters -> dp; the
    all-reduces inside the layers -> tp."""
    if record.op in ("send", "recv"):
        return "pp"
    if record.phase == "dp sync" or record.op in ("all_gather", "reduce_scatter"):
        return "dp"
    return "tp"


def by_axis(ledger: CommLedger, wire: WireMeter, topo: Topology, rank: int) -> dict[str, AxisComm]:
    """Calls and bytes by mesh axis (each ledger record checked against its axis's group size);
    wire bytes attributed by peer: the axis whose group holds both ranks."""
    size = {"tp": topo.tp, "dp": topo.dp}
    out = {ax: AxisComm() for ax in AXES}
    for r in ledger.records:
        ax = _axis_of(r)
        assert ax == "pp" or r.group_size == size[ax], (r, ax)
        out[ax].calls += 1
        out[ax].ledger += r.bytes_sent
        out[ax].ops[r.op] = out[ax].ops.get(r.op, 0) + 1
        out[ax].op_bytes[r.op] = out[ax].op_bytes.get(r.op, 0.0) + r.bytes_sent
    sent_to = wire.sent_to if wire.sent is not None else None
    for ax in AXES:
        if sent_to is not None:
            peers = set(topo.axis_ranks(ax, rank)) - {rank}
            out[ax].wire = sum(b for peer, b in sent_to.items() if peer in peers)
    return out


def _placements(model: nn.Module, names: tuple[str, ...]) -> dict[str, dict]:
    """Mesh axis -> placement, global and local shape of a few DTensor parameters."""
    params = dict(model.named_parameters())
    out = {}
    for n in names:
        p = params[n]
        axes = p.device_mesh.mesh_dim_names
        out[n] = dict(
            placements={a: str(pl) for a, pl in zip(axes, p.placements)},
            shape=tuple(p.shape),
            local=tuple(p.to_local().shape),
        )
    return out


def _param_bytes(model: nn.Module) -> dict[str, int]:
    """Bytes of this rank's (local) parameters: in the blocks, and the rest (the root)."""
    out = {"blocks": 0, "root": 0}
    for n, p in model.named_parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        out["blocks" if n.startswith("blocks.") else "root"] += local.numel() * local.element_size()
    return out


@dataclass
class Run2D:
    losses: list[float]  # mean loss of the global batch per step (every rank)
    grads: dict[str, torch.Tensor]  # the first step's full gradients
    comm: dict[str, AxisComm]  # the last step, by axis
    coords: dict[str, int]
    param_bytes: dict[str, int]  # this rank's TP shard (before FSDP cuts it over dp)
    placements: dict[str, dict] = field(default_factory=dict)  # torch: DTensor layouts


def train_2d(
    ctx: Any,
    variant: str = "torch",
    steps: int = 3,
    global_batch: int = 16,
    cfg: GPTConfig = CFG,
    dp: int = 2,
    tp: int = 2,
) -> Run2D:
    """dp x tp training of TinyGPT. Each dp group trains on its shard of the global batch; the
    tp ranks of a dp group see the same rows."""
    topo = Topology(dp=dp, tp=tp)
    mesh = topo.build_mesh()
    c = topo.coords(ctx.rank)
    model = TinyGPT(cfg, seed=0)  # same seed everywhere: every rank starts from the same weights
    if variant == "torch":
        apply_tp(model, mesh["tp"])
    else:
        apply_tp_ours(model, mesh.get_group("tp"))
    sizes = _param_bytes(model)
    if variant == "torch":
        apply_fsdp(model, mesh["dp"])
    opt = make_optimizer(model.parameters(), "adamw", lr=LR)
    losses, grads0 = [], {}
    for i, batch in enumerate(token_batches(steps, global_batch, cfg.seq_len, cfg.vocab_size, 1)):
        x, y = shard_for_rank(batch, c["dp"], dp)  # (B/dp, T): the same on both tp ranks
        ledger = CommLedger()
        with ledger, WireMeter(ctx) as wire:
            opt.zero_grad(set_to_none=True)
            loss = lm_loss(model(x), y)
            loss.backward()
            if variant == "ours":
                with ledger.phase("dp sync"):
                    sync_dp_grads(model, mesh.get_group("dp"))
            opt.step()
        if i == 0:  # full gradients (collectives: every rank gathers its shards)
            grads0 = (
                {n: p.grad.full_tensor() for n, p in model.named_parameters()}
                if variant == "torch"
                else unshard(model, grads=True)
            )
        losses.append(loss.item())
    mean = torch.tensor(losses)
    dist.all_reduce(mean, group=mesh.get_group("dp"))  # equal shards: mean of the dp means
    run = Run2D((mean / dp).tolist(), grads0, by_axis(ledger, wire, topo, ctx.rank), c, sizes)
    if variant == "torch":
        run.placements = _placements(
            model, ("blocks.0.mlp.fc.weight", "blocks.0.mlp.proj.weight", "ln_f.weight")
        )
    return run


def experiments_2d(
    ctx: Any, steps: int = 3, variants: tuple[str, ...] = ("torch", "ours"), **kwargs: Any
) -> dict[str, Run2D]:
    """Several 2D runs in one launch: {variant: Run2D}."""
    return {v: train_2d(ctx, v, steps, **kwargs) for v in variants}


@dataclass
class TraceStep:
    """A run of consecutive communication calls of one kind in one op of the schedule."""

    op: str  # "F mb0", "BW mb3" (compute of that op), "p2p", "dp sync"
    call: str  # e.g. "all_reduce", "send"
    axis: str
    count: int
    ledger: float


@dataclass
class Run3D:
    losses: list[float]  # global mean loss per step
    grads: dict[str, torch.Tensor]  # first step, full-model names, unsharded over tp
    comm: dict[str, AxisComm]  # the last step, by axis
    coords: dict[str, int]
    layers: int  # blocks on this stage
    param_bytes: int  # bytes all-reduced over dp (this rank's shard of its stage)
    trace: list[TraceStep]  # the last step, in order


def _trace(ledger: CommLedger) -> list[TraceStep]:
    out: list[TraceStep] = []
    for r in ledger.records:
        op, axis = r.phase if r.phase != "pipeline" else "p2p", _axis_of(r)
        if out and (out[-1].op, out[-1].call, out[-1].axis) == (op, r.op, axis):
            out[-1].count += 1
            out[-1].ledger += r.bytes_sent
        else:
            out.append(TraceStep(op, r.op, axis, 1, r.bytes_sent))
    return out


def train_3d(
    ctx: Any,
    steps: int = 3,
    m: int = 4,
    micro_batch: int = 2,
    cfg: GPTConfig = CFG,
    dp: int = 2,
    tp: int = 2,
    pp: int = 2,
) -> Run3D:
    """dp x tp x pp from scratch: 1F1B over the pp axis, our Megatron TP inside each stage, one
    gradient all-reduce over the dp axis per step. Global batch = dp * m * micro_batch."""
    topo = Topology(dp=dp, tp=tp, pp=pp)
    topo.check(ctx.world_size)
    mesh = topo.build_mesh()
    c = topo.coords(ctx.rank)
    model = TinyGPT(cfg, seed=0)
    first_block = sum(len(s.blocks) for s in split_stages(model, pp)[: c["pp"]])
    stage = apply_tp_ours(apply_pp(model, topo, ctx.rank), mesh.get_group("tp"))
    opt = make_optimizer(stage.parameters(), "adamw", lr=LR)
    prev_rank, next_rank = pipeline_neighbours(topo, ctx.rank)  # global ranks on the pp axis
    losses, grads0 = [], {}
    for i, batch in enumerate(
        token_batches(steps, dp * m * micro_batch, cfg.seq_len, cfg.vocab_size, 1)
    ):
        x, y = shard_for_rank(batch, c["dp"], dp)  # (m * b, T): this dp group's rows
        w = StageWorker(
            stage,
            c["pp"],
            pp,
            prev_rank,
            next_rank,
            x.chunk(m),
            y.chunk(m),
            (micro_batch, cfg.seq_len, cfg.d_model),
            tag=next(_TAGS) * 1024,
        )
        ledger = CommLedger()
        w.observer = lambda op, mb, _w: ledger.phase(f"{op} mb{mb}")  # name each op's calls
        with ledger, WireMeter(ctx) as wire:
            opt.zero_grad(set_to_none=True)
            with ledger.phase("pipeline"):
                one_f_one_b(w)  # m forwards and m backwards, p2p on the pp axis, TP inside
                w.finish()
            with ledger.phase("dp sync"):
                p_bytes = sync_dp_grads(stage, mesh.get_group("dp"))
            opt.step()
        if i == 0:  # collectives over tp: every rank of the stage calls it
            grads0 = _full_grads(stage, first_block)
        loss = torch.tensor([w.loss if w.last and c["tp"] == 0 else 0.0])
        dist.all_reduce(loss)  # one rank per dp group holds its shard's mean loss: sum / dp
        losses.append(loss.item() / dp)
    return Run3D(
        losses,
        grads0,
        by_axis(ledger, wire, topo, ctx.rank),
        c,
        len(stage.blocks),
        p_bytes,
        _trace(ledger),
    )


def _full_grads(stage: nn.Module, first_block: int) -> dict[str, torch.Tensor]:
    """Gradients of this stage under the full model's names, TP shards gathered (all-gathers)."""
    out = {}
    for i, block in enumerate(stage.blocks):
        out |= {f"blocks.{first_block + i}.{n}": g for n, g in unshard(block, grads=True).items()}
    for n, p in stage.named_parameters():
        if not n.startswith("blocks."):
            out[n] = p.grad.clone()
    return out


def reference_grads(
    data_seed: int = 1, global_batch: int = 16, cfg: GPTConfig = CFG
) -> dict[str, torch.Tensor]:
    """One process, whole first batch: the gradients the 2D and 3D runs must reproduce."""
    model = TinyGPT(cfg, seed=0)
    x, y = token_batches(1, global_batch, cfg.seq_len, cfg.vocab_size, data_seed)[0]
    lm_loss(model(x), y).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}
