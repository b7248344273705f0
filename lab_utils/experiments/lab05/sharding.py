"""Lab 05's experiments: the rank workers the lab launches, each returning small dataclasses.

    train_variants(ctx, cfg, steps, batch, names)  DDP, ZeRO-1/2 (zero.py), FSDP (fsdp.py) and
                                                   torch's fully_shard, same data: losses,
                                                   memory, the last step's collectives
    mixed_precision_reference(...)                 ONE process doing FSDP's casts (the check)

Gradient accumulation and the practitioner's idioms (meta-device init, clipping, HSDP) are in
``practice.py``; one FSDP step unit by unit, on the emulated clock, in ``units.py``.

Every technique observed here is used as a learner would use it; measurement stays outside:
CommLedger sees the collectives, WireMeter the bytes sent, model_state_bytes the storages.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from lab_utils.data import shard_for_rank, token_batches
from lab_utils.experiments.common import mean_over_ranks
from lab_utils.measure import CommLedger, WireMeter, model_state_bytes
from lab_utils.models import GPTConfig, TinyGPT
from lab_utils.parallel.fsdp import FSDP, MixedPrecision
from lab_utils.parallel.zero import ZeroOptimizer
from lab_utils.reference import ReferenceRun, default_loss, make_optimizer

LR = 1e-2
BF16 = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
# name -> (family, options): "zero" = ZeroOptimizer(stage), "ours" = FSDP, "torch" = fully_shard
VARIANTS: dict[str, tuple[str, dict]] = {
    "DDP": ("zero", {"stage": 0}),
    "ZeRO-1": ("zero", {"stage": 1}),
    "ZeRO-2": ("zero", {"stage": 2}),
    "FSDP": ("ours", {}),
    "FSDP keep": ("ours", {"reshard_after_forward": False}),
    "FSDP bf16": ("ours", {"mp": BF16}),
    "fully_shard": ("torch", {}),
    "fully_shard keep": ("torch", {"reshard_after_forward": False}),
    "fully_shard bf16": ("torch", {"mp": BF16}),
    "fully_shard root resharded": ("torch", {"root_reshard": True}),
    "fully_shard offload": ("torch", {"offload": True}),
}


@dataclass
class TrainResult:
    """One variant on one rank. "ledger" bytes: the ring formula applied to the tensor sizes
    the CommLedger saw called (what was called is measured, not what moved); "wire": what the
    kernel counted leaving this rank's sockets in the same step (WireMeter)."""

    losses: list[float]  # mean loss over the global batch, per step
    memory: dict[str, int]  # model state this rank holds after the last step (storages)
    calls: dict[str, int]  # collectives of the last step, by op
    ledger_bytes: dict[str, float]  # bytes sent in the last step, by op
    ledger_total: float = 0.0
    wire: int | None = None  # bytes this rank really sent in the last step


def build(
    name: str, cfg: GPTConfig, group: Any
) -> tuple[nn.Module, Any, Callable, Callable, Callable]:
    """(model to call, optimizer, zero_grad, step, memory) for variant ``name``."""
    family, opts = VARIANTS[name]
    model = TinyGPT(cfg, seed=0)
    if family == "zero":
        zero = ZeroOptimizer(model, opts["stage"], group, "adamw", LR)
        return model, zero.optimizer, zero.zero_grad, zero.step, zero.state_bytes
    if family == "ours":
        model = FSDP(
            model,
            group,
            mp=opts.get("mp", MixedPrecision()),
            reshard_after_forward=opts.get("reshard_after_forward", True),
        )
    else:
        apply_fully_shard(model, group, **opts)
    opt = make_optimizer(model.parameters(), "adamw", LR)  # built AFTER sharding: over shards
    return (
        model,
        opt,
        lambda: opt.zero_grad(set_to_none=False),
        opt.step,
        lambda: model_state_bytes(model, opt),
    )


def apply_fully_shard(
    model: TinyGPT,
    group: Any = None,
    reshard_after_forward: bool = True,
    mp: MixedPrecision | None = None,
    root_reshard: bool = False,
    offload: bool = False,
    mesh: Any = None,
) -> None:
    """torch's FSDP2 the way torchtitan applies it: each block, then the root. The root's
    reshard_after_forward stays None (torch: "not the root") unless ``root_reshard``."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    if mesh is None and group is not None:
        mesh = DeviceMesh.from_group(group, "cpu")
    kw: dict[str, Any] = {"mesh": mesh}
    if mp is not None and mp.param_dtype is not None:
        kw["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=mp.param_dtype, reduce_dtype=mp.reduce_dtype
        )
    if offload:
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=False)
    for block in model.blocks:
        fully_shard(block, reshard_after_forward=reshard_after_forward, **kw)
    fully_shard(
        model,
        reshard_after_forward=True if root_reshard else (None if reshard_after_forward else False),
        **kw,
    )


def train_variants(
    ctx: Any,
    cfg: GPTConfig,
    steps: int,
    global_batch: int,
    names: tuple[str, ...] = tuple(VARIANTS),
) -> dict[str, TrainResult]:
    """Train each variant ``steps`` AdamW steps on the same global batches (each rank its
    share); the CommLedger records the LAST step (zero_grad, forward, backward, step)."""
    batches = token_batches(steps, global_batch, cfg.seq_len, cfg.vocab_size, seed=1)
    out = {}
    for name in names:
        model, _opt, zero_grad, step, memory = build(name, cfg, ctx.group)
        losses, ledger, wire = [], CommLedger(), WireMeter(ctx)
        for i, batch in enumerate(batches):
            x, y = shard_for_rank(batch, ctx.rank, ctx.world_size)
            last = i == steps - 1
            with (
                ledger if last else contextlib.nullcontext(),
                wire if last else contextlib.nullcontext(),
            ):
                zero_grad()
                loss = default_loss(model(x), y)
                loss.backward()
                step()
            losses.append(loss.item())
        by_op = ledger.summary()["by_op"]
        state = memory()
        out[name] = TrainResult(
            mean_over_ranks(losses, ctx.group),
            {k: state[k] for k in ("params", "grads", "optimizer", "total")},
            {op: row["count"] for op, row in by_op.items()},
            {op: row["bytes_sent"] for op, row in by_op.items()},
            ledger.bytes_sent(),
            wire.sent,
        )
    return out


# ---- references (one process) -------------------------------------------------------------------
def mixed_precision_reference(
    model_fn: Callable[[], nn.Module],
    batches: list,
    steps: int,
    world: int,
    mp: MixedPrecision,
    lr: float = LR,
    optimizer: str = "adamw",
) -> list[float]:
    """What FSDP with ``mp`` computes, in ONE process: fp32 master weights; each step casts a
    copy to param_dtype, runs each of the ``world`` ranks' shares of the batch on it, casts each
    gradient to reduce_dtype, averages them, and lets the optimizer update the fp32 master.
    Returns the mean loss of the shares, per step (as the ranks report it)."""
    return mixed_precision_run(model_fn, batches, steps, world, mp, lr, optimizer).losses


def mixed_precision_run(
    model_fn: Callable[[], nn.Module],
    batches: list,
    steps: int,
    world: int,
    mp: MixedPrecision,
    lr: float = LR,
    optimizer: str = "adamw",
) -> ReferenceRun:
    """mixed_precision_reference's losses and the final fp32 master weights."""
    master = model_fn()
    opt = make_optimizer(master.parameters(), optimizer, lr)
    losses = []
    for step in range(steps):
        compute = copy.deepcopy(master).to(mp.param_dtype)
        grads, step_losses = [], []
        for rank in range(world):
            x, y = shard_for_rank(batches[step % len(batches)], rank, world)
            compute.zero_grad()
            loss = default_loss(compute(x), y)
            loss.backward()
            step_losses.append(loss.item())
            grads.append(
                [p.grad.to(mp.reduce_dtype or mp.param_dtype) for p in compute.parameters()]
            )
        for p, per_rank in zip(master.parameters(), zip(*grads)):
            p.grad = (torch.stack(per_rank).sum(0) / world).to(p.dtype)
        opt.step()
        losses.append(sum(step_losses) / world)
    return ReferenceRun(losses, {k: v.detach().clone() for k, v in master.state_dict().items()})
