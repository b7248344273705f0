"""ZeRO-1 and ZeRO-2 from scratch (lab 05): shard the optimizer state, then the gradients, over
the K data-parallel ranks (Rajbhandari et al. 2020, "ZeRO", Sec. 5). ZeRO-3 also shards the
weights, so it has to wrap the model's forward and backward: that is ``fsdp.FSDP``.

    zero = ZeroOptimizer(model, stage, ctx.group, "adamw", lr)   # stage 0 = DDP, 1, 2
    zero.zero_grad(); loss_fn(model(x), y).backward(); zero.step()
    zero.state_bytes()       # per-rank params / grads / optimizer bytes, as calc.model_state_memory
    zero1_step(...)          # ZeRO-1 on one flat buffer, the exercise's reference

The model is cut into UNITS (each TinyGPT block or ToyMLP Linear, plus a "root" unit with the
rest: embeddings, final norm, head). A unit's parameters live in ONE flat buffer of P_u elements
(zero-padded to a multiple of K, so every rank owns an equal slice); rank r owns slice r. The
optimizer (a plain torch optimizer) sees only the slices, so Adam's m, v are sharded. A step is
the three named phases of ``zero1_step``, per unit:

  stage 0 (DDP)      1. reduce: all-reduce(grads)      2. update: whole buffer   3. gather: -
  stage 1 (P_os)     1. reduce: reduce-scatter(grads)  2. update: own slice      3. all-gather
  stage 2 (P_os+g)   as stage 1, but phase 1 runs DURING backward, as soon as a unit's last
                     gradient arrives, and the unit's full gradient is freed at once

Bytes one rank sends per step, P = bytes of the (padded) parameters, ring collectives:
  stage 0: all-reduce 2(K-1)/K P.  Stages 1-2: reduce-scatter (K-1)/K P + all-gather (K-1)/K P =
  the SAME 2(K-1)/K P. With gradient accumulation over A micro-batches stages 0-1 still reduce
  once per step, but stage 2 reduce-scatters every micro-batch (it keeps no full gradient to
  add into): (A+1)(K-1)/K P. That is why ZeRO-1 is the usual choice with large accumulation.
Per-rank model state, fp32 Adam as run here (4 w + 4 g + 8 m,v = 16 B/param, calc "fp32_adam"):
  16N, 8N + 8N/K, 4N + 12N/K (+ padding). Mixed precision ("mixed_adam", the fp32 master
  belongs to the optimizer): 16N, 4N + 12N/K, 2N + 14N/K. One rank: plain training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.calc import zero_stage
from lab_utils.parallel.backward_tls import without_autograd_context
from lab_utils.reference import make_optimizer

AVG = dist.ReduceOp.AVG  # the mean over ranks (gloo has it on torch 2.13; only PREMUL_SUM is not)


def zero1_step(
    flat_param: torch.Tensor,
    flat_grad: torch.Tensor,
    shard: nn.Parameter,
    optimizer: torch.optim.Optimizer,
    group: Any = None,
) -> None:
    """ZeRO-1 on ONE flat buffer, its three phases in plain sight (the lab 05 exercise).

    flat_param (P,): the full parameters, identical on every rank (P divisible by K).
    flat_grad (P,): THIS rank's gradient (of its own part of the batch).
    shard (P/K,): a Parameter holding this rank's slice r of flat_param; `optimizer` is built
    over [shard] only, so its state (Adam m, v) is 1/K of the model's.
    Sends (K-1)/K x 4P bytes twice (reduce-scatter + all-gather) = 2(K-1)/K x 4P: as DDP.
    """
    grad_shard = torch.empty_like(shard)  # (P/K,)
    # 1. reduce-scatter: rank r receives slice r of the MEAN of every rank's gradient
    dist.reduce_scatter_single(grad_shard, flat_grad, op=AVG, group=group)
    # 2. update: the optimizer touches only this rank's slice (and its slice of Adam's m, v)
    shard.grad = grad_shard
    optimizer.step()
    # 3. all-gather: every rank's updated slice, in rank order, back into the full parameters
    dist.all_gather_single(flat_param, shard.detach(), group=group)


def check_stage(stage: Any) -> int:
    """A ZeRO stage for this optimizer-side family: the calculators' one check
    (``calc.zero_stage``), and a pointer to FSDP for stage 3."""
    stage = zero_stage(stage)
    if stage == 3:
        raise ValueError(
            "ZeRO-3 shards the weights too, so it must wrap the model's forward and "
            "backward: use lab_utils.parallel.fsdp.FSDP(model, group) and any torch "
            "optimizer over its parameters()"
        )
    return stage


@dataclass(eq=False)
class FlatUnit:
    """One group of parameters reduced and gathered together, in one flat buffer."""

    name: str
    params: list[nn.Parameter]  # after set-up: views into `full`
    numel: int  # N_u: real parameters
    padded: int  # P_u: N_u rounded up to a multiple of K
    full: torch.Tensor  # (P_u,) all parameters, on every rank
    shard: nn.Parameter  # (P_u / K,) my slice (stage 0: all of it): what the optimizer updates
    grad_full: torch.Tensor | None = None  # (P_u,) stages 0-1: persistent full gradient
    pending: int = 0  # stage 2: params whose gradient has not arrived in this backward


def _views(flat: torch.Tensor, params: list[nn.Parameter]) -> list[torch.Tensor]:
    """Consecutive views of `flat` shaped like `params` (the padding at the end is left out)."""
    views, offset = [], 0
    for p in params:
        views.append(flat[offset : offset + p.numel()].view_as(p))
        offset += p.numel()
    return views


def default_units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Per-layer units: model.blocks[i] (TinyGPT) or each child of model.net with parameters
    (ToyMLP), then ("root", model) for the parameters left over. Mirrors fully_shard(block) for
    every block followed by fully_shard(model)."""
    children = getattr(model, "blocks", None)
    if children is None:
        children = [m for m in getattr(model, "net", []) if any(True for _ in m.parameters())]
    return [(f"L{i}", m) for i, m in enumerate(children)] + [("root", model)]


class ZeroOptimizer:
    """ZeRO stage `stage` (0 = DDP, 1, 2) with a plain torch optimizer over the shards.

    Every rank must build the same model (same seed). Use zero.zero_grad(), not
    model.zero_grad(): stages 0-1 keep every .grad as a view of one flat buffer per unit.
    """

    def __init__(
        self,
        model: nn.Module,
        stage: int,
        group: Any = None,
        optimizer: str = "adamw",
        lr: float = 1e-2,
        weight_decay: float = 0.0,
        units: list[tuple[str, nn.Module]] | None = None,
    ) -> None:
        self.model, self.stage = model, check_stage(stage)
        self.group = group  # None: the default group, never held (data_parallel's docstring)
        self.K, self.rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        self.units, seen = [], set()
        for name, module in units if units is not None else default_units(model):
            params = [p for p in module.parameters() if p.requires_grad and id(p) not in seen]
            seen.update(id(p) for p in params)
            if params:
                self.units.append(self._make_unit(name, params))
        self.optimizer = make_optimizer([u.shard for u in self.units], optimizer, lr, weight_decay)
        self.zero_grad()
        if stage == 2:  # reduce-scatter a unit as soon as its last gradient has arrived
            for u in self.units:
                for p in u.params:
                    p.register_post_accumulate_grad_hook(lambda _p, u=u: self._grad_arrived(u))

    def _make_unit(self, name: str, params: list[nn.Parameter]) -> FlatUnit:
        numel = sum(p.numel() for p in params)
        padded = -(-numel // self.K) * self.K
        full = torch.zeros(padded, dtype=params[0].dtype, device=params[0].device)
        for p, view in zip(params, _views(full, params)):
            view.copy_(p.detach())
            p.data = view  # the parameter now lives inside the flat buffer
        lo, size = (self.rank * padded // self.K, padded // self.K) if self.stage else (0, padded)
        shard = nn.Parameter(full[lo : lo + size])  # a VIEW: updating it updates `full` (no copy)
        unit = FlatUnit(name, params, numel, padded, full, shard, pending=len(params))
        if self.stage <= 1:
            unit.grad_full = torch.zeros_like(full)  # persistent: 4 P_u bytes on every rank
        return unit

    # ---- the three phases -------------------------------------------------------------------
    def step(self) -> None:
        """1. reduce (stages 0-1; stage 2 did it in backward) -> 2. update -> 3. all-gather."""
        if self.stage <= 1:
            for u in self.units:
                self._check_grad_views(u)
                self.reduce_grads(u)
        elif any(u.pending != len(u.params) for u in self.units):
            late = [u.name for u in self.units if u.pending != len(u.params)]
            raise RuntimeError(
                f"units {late}: some parameters got no gradient in backward; "
                "ZeRO-2 reduces a unit only when all of them have arrived"
            )
        self.optimizer.step()  # 2. Adam on P_u / K elements per unit (stage 0: P_u)
        if self.stage >= 1:
            for u in self.units:
                self.gather_params(u)

    def reduce_grads(self, u: FlatUnit) -> None:
        """Phase 1. Stage 0: all-reduce the full gradient (2(K-1)/K x 4 P_u bytes sent).
        Stage 1: reduce-scatter it ((K-1)/K x 4 P_u) and keep the mean of MY slice."""
        if self.stage == 0:
            dist.all_reduce(u.grad_full, op=AVG, group=self.group)
        else:
            mine = torch.empty_like(u.shard)  # (P_u / K,)
            dist.reduce_scatter_single(mine, u.grad_full, op=AVG, group=self.group)
            u.shard.grad.copy_(mine)  # the shard's .grad is a view of grad_full (no copy kept)

    def gather_params(self, u: FlatUnit) -> None:
        """Phase 3: every rank contributes its updated shard; (K-1)/K x 4 P_u bytes sent."""
        dist.all_gather_single(u.full, u.shard.detach(), group=self.group)

    @without_autograd_context  # safe at a plain interpreter exit (backward_tls.py)
    def _grad_arrived(self, u: FlatUnit) -> None:
        """Stage 2, during backward: phase 1 for unit `u` once its last gradient is in."""
        u.pending -= 1
        if u.pending:
            return
        u.pending = len(u.params)
        pad = torch.zeros(u.padded - u.numel, dtype=u.full.dtype, device=u.full.device)
        flat = torch.cat([p.grad.flatten() for p in u.params] + [pad])  # (P_u,) transient
        mine = torch.empty_like(u.shard)  # (P_u / K,)
        dist.reduce_scatter_single(mine, flat, op=AVG, group=self.group)
        u.shard.grad.add_(mine)  # add: with accumulation this runs once per MICRO-batch
        for p in u.params:
            p.grad = None  # ZeRO-2: the full gradient of this unit is freed right here

    def _check_grad_views(self, u: FlatUnit) -> None:
        if any(
            p.grad is None or p.grad.data_ptr() != v.data_ptr()
            for p, v in zip(u.params, _views(u.grad_full, u.params))
        ):
            raise RuntimeError(
                "a .grad is no longer a view of the flat gradient buffer: "
                "call zero.zero_grad(), not model.zero_grad()"
            )

    # ---- bookkeeping --------------------------------------------------------------------------
    def zero_grad(self) -> None:
        """Zero the persistent gradient buffers (never None: they are the measured grads).
        Stages 0-1: every p.grad is a view of grad_full, so backward adds into it in place."""
        for u in self.units:
            if u.grad_full is not None:
                u.grad_full.zero_()
                for p, view in zip(u.params, _views(u.grad_full, u.params)):
                    p.grad = view
                lo = self.rank * u.padded // self.K if self.stage else 0
                u.shard.grad = u.grad_full[lo : lo + u.shard.numel()]
            elif u.shard.grad is None:
                u.shard.grad = torch.zeros_like(u.shard)
            else:
                u.shard.grad.zero_()

    def state_bytes(self) -> dict[str, int]:
        """Bytes of model state this rank holds now: distinct storages of parameters, gradients
        and per-element optimizer state (Adam m, v; the scalar `step` counters are excluded).
        `padding` = elements added to make every unit divisible by K."""

        def total(tensors: list[torch.Tensor | None]) -> int:
            storages = {
                t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in tensors
                if t is not None and t.untyped_storage().nbytes()
            }
            return sum(storages.values())

        params = total([u.full for u in self.units] + [u.shard for u in self.units])
        grads = total(
            [u.grad_full for u in self.units]
            + [u.shard.grad for u in self.units]
            + [p.grad for u in self.units for p in u.params]
        )
        optim = total(
            [
                s
                for u in self.units
                for s in self.optimizer.state[u.shard].values()
                if isinstance(s, torch.Tensor) and s.numel() == u.shard.numel()
            ]
        )
        return {
            "params": params,
            "grads": grads,
            "optimizer": optim,
            "total": params + grads + optim,
            "n_params": sum(u.numel for u in self.units),
            "padding": sum(u.padded - u.numel for u in self.units),
        }

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The model's weights (every rank holds them all in stages 0-2: no communication)."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
