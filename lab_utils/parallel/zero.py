"""ZeRO stages 0-3 from scratch (lab 05): shard the optimizer state, then the gradients, then
the weights, over the K data-parallel ranks (Rajbhandari et al. 2020, "ZeRO", Sec. 5).

    zero = ZeroOptimizer(model, stage, ctx.group, "adamw", lr)   # stage 0 = DDP
    zero.zero_grad(); loss_fn(model(x), y).backward(); zero.step()
    zero.state_bytes()       # per-rank params / grads / optimizer bytes, as calc.model_state_memory
    zero1_step(...)          # ZeRO-1 on one flat buffer, the exercise's reference

The model is cut into UNITS (each TinyGPT block or ToyMLP Linear, plus a "root" unit with the
rest: embeddings, final norm, head). A unit's parameters live in ONE flat buffer of P_u elements
(zero-padded to a multiple of K: gloo has no uneven reduce-scatter); rank r owns slice r. The
optimizer (a plain torch optimizer) sees only the slices, so Adam's m, v are sharded for every
stage >= 1. A step is three named phases (nanochat style):

  stage 0 (DDP)      reduce: all-reduce(grads)       update: whole buffer   gather: -
  stage 1 (P_os)     reduce: reduce-scatter(grads)   update: own slice      gather: all-gather
  stage 2 (P_os+g)   as stage 1, but each unit is reduce-scattered DURING backward, as soon as its
                     last gradient arrives, and its full gradient freed at once
  stage 3 (P_os+g+p) only the slice of the weights is kept: a unit is all-gathered before its
                     forward, freed, all-gathered AGAIN before its backward, freed after its
                     reduce-scatter (reshard_after_forward=False keeps it from forward to backward)

Bytes one rank sends per step, P = bytes of the (padded) parameters, ring collectives:
  stage 0: all-reduce 2(K-1)/K P.  Stages 1-2: reduce-scatter (K-1)/K P + all-gather (K-1)/K P =
  the SAME 2(K-1)/K P.  Stage 3: 2 all-gathers + 1 reduce-scatter = 3(K-1)/K P = 1.5x DDP
  (2(K-1)/K P with reshard_after_forward=False).
Per-rank model state, fp32 Adam as run here (4 w + 4 g + 8 m,v = 16 B/param, calc "fp32_adam"):
  16N, 8N + 8N/K, 4N + 12N/K, 16N/K (+ padding). Mixed precision ("mixed_adam", the fp32 master
  belongs to the optimizer): 16N, 4N + 12N/K, 2N + 14N/K, 16N/K. One rank: plain training.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.reference import make_optimizer

AVG = dist.ReduceOp.AVG  # the mean over ranks: each rank's grad is the mean over ITS shard


def zero1_step(flat_param: torch.Tensor, flat_grad: torch.Tensor, shard: nn.Parameter,
               optimizer: torch.optim.Optimizer, group: Any = None) -> None:
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


@dataclass(eq=False)
class Unit:
    """One group of parameters gathered, reduced and freed together."""

    name: str
    module: nn.Module  # forward hooks (stage 3) go here
    params: list[nn.Parameter]  # after set-up: views into `full`
    numel: int  # N_u: real parameters
    padded: int  # P_u: N_u rounded up to a multiple of K
    full: torch.Tensor  # (P_u,) all parameters; its storage is freed between uses in stage 3
    shard: nn.Parameter  # (P_u / K,) this rank's slice: what the optimizer updates
    grad_full: torch.Tensor | None = None  # (P_u,) stages 0-1: persistent full gradient
    pending: int = 0  # stages 2-3: params whose gradient has not arrived in this backward


def _views(flat: torch.Tensor, params: list[nn.Parameter]) -> list[torch.Tensor]:
    """Consecutive views of `flat` shaped like `params` (the padding at the end is left out)."""
    views, offset = [], 0
    for p in params:
        views.append(flat[offset:offset + p.numel()].view_as(p))
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
    """ZeRO stage `stage` (0-3) data parallelism with a torch optimizer over the shards.

    Every rank must build the same model (same seed). With `timeline` (measure.Timeline) every
    all-gather / forward / backward / reduce-scatter / optimizer span is recorded, mb=unit name.
    Use zero.zero_grad(), not model.zero_grad(): stages 0-1 keep .grad as views of a flat buffer.
    """

    def __init__(self, model: nn.Module, stage: int, group: Any = None, optimizer: str = "adamw",
                 lr: float = 1e-2, weight_decay: float = 0.0,
                 units: list[tuple[str, nn.Module]] | None = None,
                 reshard_after_forward: bool = True, timeline: Any = None) -> None:
        if stage not in (0, 1, 2, 3):
            raise ValueError(f"stage must be 0 (DDP), 1, 2 or 3, got {stage!r}")
        self.model, self.stage = model, stage
        self.group = group if group is not None else dist.group.WORLD
        self.K, self.rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        self.reshard_after_forward = reshard_after_forward
        self.timeline = timeline  # lab_utils.measure.Timeline or None
        self._open: dict[str, tuple[str, float]] = {}  # unit -> (pass, start) of a compute span
        self.peak_gathered_bytes = 0  # stage 3: most bytes of full (unsharded) params held at once
        self.held_trace: list[tuple[float, int]] = []  # (time, bytes held) when timeline is set
        self.units, seen = [], set()
        for name, module in units if units is not None else default_units(model):
            params = [p for p in module.parameters() if p.requires_grad and id(p) not in seen]
            seen.update(id(p) for p in params)
            if params:
                self.units.append(self._make_unit(name, module, params))
        self.optimizer = make_optimizer([u.shard for u in self.units], optimizer, lr,
                                        weight_decay)
        self.zero_grad()
        if stage >= 2:  # reduce-scatter a unit as soon as its last gradient has arrived
            for u in self.units:
                for p in u.params:
                    p.register_post_accumulate_grad_hook(lambda _p, u=u: self._grad_arrived(u))
        if stage == 3:
            for u in self.units:
                u.module.register_forward_pre_hook(lambda _m, _a, u=u: self._before(u, "fwd"))
                u.module.register_forward_hook(lambda _m, _a, out, u=u: self._after_fwd(u, out))
                self._free(u)

    def _make_unit(self, name: str, module: nn.Module, params: list[nn.Parameter]) -> Unit:
        numel = sum(p.numel() for p in params)
        padded = -(-numel // self.K) * self.K
        full = torch.zeros(padded, dtype=params[0].dtype, device=params[0].device)
        for p, view in zip(params, _views(full, params)):
            view.copy_(p.detach())
            p.data = view  # the parameter now lives inside the flat buffer
        if self.stage == 0:
            shard = nn.Parameter(full)  # DDP: every rank updates everything
        else:
            lo = self.rank * padded // self.K
            shard_view = full[lo:lo + padded // self.K]  # (P_u / K,)
            # stages 1-2 keep the full parameters, so the shard is a VIEW of them (no copy);
            # stage 3 keeps only the shard, so it owns its memory and `full` is freed.
            shard = nn.Parameter(shard_view.clone() if self.stage == 3 else shard_view)
        unit = Unit(name, module, params, numel, padded, full, shard, pending=len(params))
        if self.stage <= 1:
            unit.grad_full = torch.zeros_like(full)  # persistent: 4 P_u bytes on every rank
        return unit

    # ---- the three phases ----------------------------------------------------------------
    def step(self) -> None:
        """reduce (stages 0-1; 2-3 did it in backward) -> update own shard -> all-gather."""
        for u in self.units:
            if u.pending != len(u.params):
                raise RuntimeError(f"unit {u.name}: {u.pending} parameter(s) got no gradient in "
                                   "backward; ZeRO-2/3 reduce a unit only when all have arrived")
        if self.stage <= 1:
            for u in self.units:
                if any(p.grad is None or p.grad.data_ptr() != v.data_ptr()
                       for p, v in zip(u.params, _views(u.grad_full, u.params))):
                    raise RuntimeError("a .grad is no longer a view of the flat gradient buffer: "
                                       "call zero.zero_grad(), not model.zero_grad()")
                self.reduce_grads(u)
        with self._span("optimizer", None, "step"):
            self.optimizer.step()  # phase 2: Adam on P_u / K elements per unit (stage 0: P_u)
        if self.stage in (1, 2):
            for u in self.units:
                self.gather_params(u)

    def reduce_grads(self, u: Unit) -> None:
        """Phase 1. Stage 0: all-reduce the full gradient (2(K-1)/K x 4 P_u bytes sent).
        Stage 1: reduce-scatter it ((K-1)/K x 4 P_u) and keep the mean of MY slice."""
        with self._span("reduce_scatter" if self.stage else "all_reduce", u, "bwd"):
            if self.stage == 0:
                dist.all_reduce(u.grad_full, op=AVG, group=self.group)
            else:
                mine = torch.empty_like(u.shard)  # (P_u / K,)
                dist.reduce_scatter_single(mine, u.grad_full, op=AVG, group=self.group)
                u.shard.grad.copy_(mine)  # the shard's .grad is a view of grad_full (no copy kept)

    def gather_params(self, u: Unit) -> None:
        """Phase 3: every rank contributes its updated shard; (K-1)/K x 4 P_u bytes sent."""
        with self._span("all_gather", u, "step"):
            dist.all_gather_single(u.full, u.shard.detach(), group=self.group)

    # ---- stages 2-3: hooks that run during forward and backward ----------------------------
    def _grad_arrived(self, u: Unit) -> None:
        u.pending -= 1
        if u.pending:
            return
        u.pending = len(u.params)
        self._end(u)  # this unit's backward compute is over
        with self._span("reduce_scatter", u, "bwd"):
            pad = torch.zeros(u.padded - u.numel, dtype=u.full.dtype, device=u.full.device)
            flat = torch.cat([p.grad.flatten() for p in u.params] + [pad])  # (P_u,) transient
            mine = torch.empty_like(u.shard)
            dist.reduce_scatter_single(mine, flat, op=AVG, group=self.group)
            u.shard.grad.add_(mine)  # add: gradient accumulation over micro-batches works
        for p in u.params:
            p.grad = None  # ZeRO-2: the full gradient of this unit is freed right here
        if self.stage == 3:
            self._free(u)

    def _gather(self, u: Unit, which: str) -> None:
        """Stage 3: re-allocate the unit's full buffer and all-gather the shards into it."""
        if u.full.untyped_storage().nbytes():
            return  # already gathered (reshard_after_forward=False, or a second output hook)
        with self._span("all_gather", u, which):
            u.full.untyped_storage().resize_(u.padded * u.full.element_size())
            dist.all_gather_single(u.full, u.shard.detach(), group=self.group)
        self.peak_gathered_bytes = max(self.peak_gathered_bytes, self._held())

    def _before(self, u: Unit, which: str) -> None:
        self._gather(u, which)
        self._begin(u, which)

    def _after_fwd(self, u: Unit, out: Any) -> None:
        self._end(u)
        if self.reshard_after_forward:
            self._free(u)  # saved views for backward keep pointing at the (now empty) storage
        outputs = out if isinstance(out, (tuple, list)) else [out]
        for t in outputs:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                # runs when d loss / d out is ready, i.e. just before this unit's backward
                t.register_hook(lambda _g, u=u: self._before(u, "bwd"))

    def _free(self, u: Unit) -> None:
        """Drop the full parameters; views (the params, autograd's saved tensors) stay valid
        and see the data again after the next all-gather writes into the same storage."""
        u.full.untyped_storage().resize_(0)
        self._held()

    def _held(self) -> int:
        """Bytes of full parameter buffers allocated now (stage 3: the units in use)."""
        held = sum(x.full.untyped_storage().nbytes() for x in self.units)
        if self.timeline is not None:
            self.held_trace.append((self.timeline.now(), held))
        return held

    # ---- bookkeeping -----------------------------------------------------------------------
    def zero_grad(self) -> None:
        """Zero the persistent gradient buffers (never None: they are the measured grads).
        Stages 0-1: every p.grad is a view of grad_full, so backward adds into it in place."""
        for u in self.units:
            if u.grad_full is not None:
                u.grad_full.zero_()
                for p, view in zip(u.params, _views(u.grad_full, u.params)):
                    p.grad = view
                lo = self.rank * u.padded // self.K if self.stage else 0
                u.shard.grad = u.grad_full[lo:lo + u.shard.numel()]
            elif u.shard.grad is None:
                u.shard.grad = torch.zeros_like(u.shard)
            else:
                u.shard.grad.zero_()

    def state_bytes(self) -> dict[str, int]:
        """Bytes of model state this rank holds now: distinct storages of parameters, gradients
        and per-element optimizer state (Adam m, v; the scalar `step` counters are excluded).
        `padding` = elements added to make every unit divisible by K."""
        def total(tensors: list[torch.Tensor]) -> int:
            storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                        for t in tensors if t is not None and t.untyped_storage().nbytes()}
            return sum(storages.values())
        params = total([u.full for u in self.units] + [u.shard for u in self.units])
        grads = total([u.grad_full for u in self.units] + [u.shard.grad for u in self.units]
                      + [p.grad for u in self.units for p in u.params])
        optim = total([s for u in self.units for s in self.optimizer.state[u.shard].values()
                       if isinstance(s, torch.Tensor) and s.numel() == u.shard.numel()])
        return {"params": params, "grads": grads, "optimizer": optim,
                "total": params + grads + optim,
                "n_params": sum(u.numel for u in self.units),
                "padding": sum(u.padded - u.numel for u in self.units)}

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The model's weights, gathered if sharded (stage 3); a collective on every rank."""
        peak, sharded = self.peak_gathered_bytes, [u for u in self.units if self.stage == 3]
        for u in sharded:
            self._gather(u, "state_dict")
        state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        for u in sharded:
            self._free(u)
        self.peak_gathered_bytes = peak  # a diagnostic of training, not of this one-off gather
        return state

    # ---- timeline: compute spans of each layer, communication spans of every collective ------
    def _begin(self, u: Unit, which: str) -> None:
        if self.timeline is not None and u.module is not self.model:  # root's wraps the rest
            self._open[u.name] = (which, self.timeline.now())

    def _end(self, u: Unit) -> None:
        if u.name in self._open:
            which, start = self._open.pop(u.name)
            name = "forward" if which == "fwd" else "backward"
            self.timeline.add(name, start, self.timeline.now(), mb=u.name, phase=which)

    @contextlib.contextmanager
    def _span(self, name: str, u: Unit | None, which: str) -> Iterator[None]:
        start = self.timeline.now() if self.timeline is not None else 0.0
        yield
        if self.timeline is not None:
            self.timeline.add(name, start, self.timeline.now(), mb=u.name if u else "",
                              phase=which)
