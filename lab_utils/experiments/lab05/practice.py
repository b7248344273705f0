"""Lab 05's practitioner experiments: gradient accumulation under each kind of sharding, and
what the FSDP2 tutorials have you type (meta-device init, clipping sharded gradients, HSDP).

    accumulation_traffic(ctx, cfg, micro, batch)   one optimizer step of A micro-batches: what
                                                   DDP (no_sync), ZeRO-1/2, fully_shard and our
                                                   FSDP communicate (ledger)
    practitioner(ctx, cfg, batch)                  fully_shard on the meta device, clip_grad_norm_
                                                   on shards, HSDP on a 2 x 2 mesh
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lab_utils.data import shard_for_rank, token_batches
from lab_utils.experiments.common import mean_over_ranks
from lab_utils.experiments.lab05.sharding import LR, apply_fully_shard
from lab_utils.measure import CommLedger, WireMeter, model_state_bytes
from lab_utils.models import GPTConfig, TinyGPT
from lab_utils.parallel.fsdp import FSDP, clip_grad_norm_
from lab_utils.parallel.zero import ZeroOptimizer
from lab_utils.reference import default_loss, make_optimizer


# ---- gradient accumulation ----------------------------------------------------------------------
@dataclass
class AccumResult:
    """One optimizer step of A micro-batches on one rank: what it called (ledger) and what
    the kernel counted leaving its sockets (wire)."""

    calls: dict[str, int]
    ledger_bytes: float
    wire: int | None
    weights_checksum: float  # sum of the gathered weights after the step: equal across variants


ACCUM_VARIANTS = (
    "DDP + no_sync",
    "ZeRO-1",
    "ZeRO-2",
    "fully_shard",
    "fully_shard, sync off",
    "fully_shard, sync off, kept",
    "FSDP, sync off",
)


def accumulation_traffic(
    ctx: Any, cfg: GPTConfig, micro: int, global_batch: int, names: tuple[str, ...] = ACCUM_VARIANTS
) -> dict[str, AccumResult]:
    """A = ``micro`` micro-batches, one optimizer step; loss / A so the gradients add up to the
    global batch's. "sync off": set_requires_gradient_sync(False) on all but the last
    micro-batch; "kept": also set_reshard_after_backward(False) (parameters stay gathered)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    batch = token_batches(1, global_batch, cfg.seq_len, cfg.vocab_size, seed=1)[0]
    xs, ys = (t.chunk(micro) for t in shard_for_rank(batch, ctx.rank, ctx.world_size))
    out = {}
    for name in names:
        model = TinyGPT(cfg, seed=0)
        if name.startswith("ZeRO"):
            zero = ZeroOptimizer(model, int(name[-1]), ctx.group, "adamw", LR)
            opt, zero_grad, step = zero.optimizer, zero.zero_grad, zero.step
        else:
            if name.startswith("DDP"):
                model = DDP(model, process_group=ctx.group)
            elif name.startswith("FSDP"):
                model = FSDP(model, ctx.group)
            else:
                apply_fully_shard(model, ctx.group)
            opt = make_optimizer(model.parameters(), "adamw", LR)
            zero_grad, step = opt.zero_grad, opt.step
        with CommLedger() as ledger, WireMeter(ctx) as wire:
            zero_grad()
            for i, (x, y) in enumerate(zip(xs, ys)):
                last = i == micro - 1
                with _no_sync(model, name, last):
                    (default_loss(model(x), y) / micro).backward()
            step()
        weights = model.full_state_dict() if isinstance(model, FSDP) else _full_weights(model)
        checksum = float(sum(w.double().sum() for w in weights.values()))
        out[name] = AccumResult(
            {op: r["count"] for op, r in ledger.summary()["by_op"].items()},
            ledger.bytes_sent(),
            wire.sent,
            checksum,
        )
    return out


def _no_sync(model: nn.Module, name: str, last: bool) -> Any:
    if name.startswith("DDP"):
        return contextlib.nullcontext() if last else model.no_sync()
    if "sync off" in name:
        model.set_requires_gradient_sync(last)
        if "kept" in name:
            model.set_reshard_after_backward(last)
    return contextlib.nullcontext()


def _full_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """Full weights of a DDP / ZeRO / fully_shard model (a collective for DTensors)."""
    out = {}
    for k, v in model.state_dict().items():
        out[k] = v.full_tensor() if hasattr(v, "full_tensor") else v
    return out


# ---- what a practitioner types ------------------------------------------------------------------
@dataclass
class Practice:
    meta_param_bytes: tuple[int, int]  # this rank's parameter bytes: on meta, after to_empty
    meta_loss: float  # first loss after loading rank 0's weights into the meta-built model
    clip_norm: dict[str, float]  # the global gradient norm as each way of clipping computes it
    clip_calls: dict[str, dict[str, int]]  # and what it communicates
    hsdp_losses: list[float]
    hsdp_calls: dict[str, int]  # "op on N ranks" -> count, one step


def practitioner(ctx: Any, cfg: GPTConfig, global_batch: int, steps: int = 2) -> Practice:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    batches = token_batches(steps, global_batch, cfg.seq_len, cfg.vocab_size, seed=1)
    x, y = shard_for_rank(batches[0], ctx.rank, ctx.world_size)
    # 1. meta-device init: no GPU holds the whole model (rank 0's host holds its state dict)
    with torch.device("meta"):
        model = TinyGPT(cfg, seed=0)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    on_meta = model_state_bytes(model)["params"]
    model.to_empty(device="cpu")  # allocates this rank's shards only, uninitialised
    full = TinyGPT(cfg, seed=0).state_dict() if ctx.rank == 0 else {}
    set_model_state_dict(
        model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    )
    loss = default_loss(model(x), y)
    loss.backward()
    meta = (on_meta, model_state_bytes(model)["params"])
    meta_loss = mean_over_ranks([loss.item()], ctx.group)[0]
    # 2. gradient clipping on shards: torch's on DTensors, ours, and torch's on OUR shards
    norms, calls = {}, {}
    ours = FSDP(TinyGPT(cfg, seed=0), ctx.group)
    default_loss(ours(x), y).backward()
    for how, clip in (
        (
            "fully_shard + torch clip_grad_norm_",
            lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9),
        ),
        ("FSDP + fsdp.clip_grad_norm_", lambda: clip_grad_norm_(ours.parameters(), 1e9, ctx.group)),
        (
            "FSDP + torch clip_grad_norm_ (wrong)",
            lambda: torch.nn.utils.clip_grad_norm_(ours.parameters(), 1e9),
        ),
    ):
        with CommLedger() as ledger:
            norm = clip()
        norms[how] = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        calls[how] = {op: r["count"] for op, r in ledger.summary()["by_op"].items()}
    # 3. HSDP on a 2 x 2 mesh: shard within a pair, replicate across pairs
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    model = TinyGPT(cfg, seed=0)
    apply_fully_shard(model, mesh=mesh)
    opt, losses = make_optimizer(model.parameters(), "adamw", LR), []
    for batch in batches:
        x, y = shard_for_rank(batch, ctx.rank, ctx.world_size)
        with CommLedger() as ledger:
            loss = default_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
    hsdp_calls: dict[str, int] = {}
    for r in ledger.records:
        key = f"{r.op} on {r.group_size} ranks"
        hsdp_calls[key] = hsdp_calls.get(key, 0) + 1
    return Practice(meta, meta_loss, norms, calls, mean_over_ranks(losses, ctx.group), hsdp_calls)
