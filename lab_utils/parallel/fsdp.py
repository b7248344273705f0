"""FSDP from scratch: ZeRO-3 as a module wrapper, with mixed precision (lab 05).

    fsdp = FSDP(model, group, mp=MixedPrecision(torch.bfloat16, torch.float32))
    optimizer = torch.optim.AdamW(fsdp.parameters(), lr=1e-2)  # ANY optimizer: over the shards
    loss_fn(fsdp(x), y).backward()   # hooks gather, free and reduce-scatter each unit inside
    optimizer.step(); optimizer.zero_grad()
    fsdp.full_state_dict()           # collective: the full fp32 weights on every rank

UNITS come from a policy: each transformer block, then the root (the model itself, holding what
the blocks leave over: embeddings, final norm, head), as torch's ``fully_shard`` is applied to
each block and then to the model. Every parameter is cut along dim 0 into K chunks of
ceil(dim0 / K) rows (zero-padded at the end, as fully_shard pads) and rank r keeps chunk r in
its own dtype (fp32): the SHARD, an nn.Parameter put in the module in place of the parameter.
So ``parameters()`` are the shards and any optimizer updates 1/K of the model, state included.

One unit in one step (U = bytes of the unit in param_dtype, G = in reduce_dtype, K ranks):
    pre-forward    all-gather the shards, cast to param_dtype first   sends (K-1)/K U
    post-forward   free the full parameters (not the root: backward needs it first)
    pre-backward   all-gather again                                   sends (K-1)/K U
      (a hook on the unit's output: it runs when d loss / d output is ready)
    post-backward  reduce-scatter the gradients (mean over ranks, in  sends (K-1)/K G
                   reduce_dtype) into the shards' .grad; free
      (a hook on the unit's input: its gradient is ready once the unit's whole backward,
      parameter gradients included, is done; units whose input needs no gradient, like the
      root reading token ids, are reduced when the backward ends)
A step sends 3(K-1)/K P (fp32: 1.5x DDP's 2(K-1)/K P) less the root's second all-gather, with
the same collectives as fully_shard. Memory per rank: the fp32 shards, their grads and the
optimizer state (16N/K with Adam), plus the full parameters of the units gathered right now,
in param_dtype (one block and the root; one more block with ``prefetch``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.parallel.backward_tls import without_autograd_context
from lab_utils.parallel.collectives import all_reduce_flat
from lab_utils.parallel.fsdp_units import WRAPPED, Unit, build_units, check_model
from lab_utils.parallel.zero import AVG


@dataclass(frozen=True)
class MixedPrecision:
    """torch's MixedPrecisionPolicy: gather and compute in ``param_dtype``, reduce-scatter the
    gradients in ``reduce_dtype`` (None: param_dtype); the shards (master weights) keep theirs."""

    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None


class UnitHooks:
    """The two halves of a unit's work (lab 05's exercise has the learner write them)."""

    @staticmethod
    def pre_forward(unit: Unit, group: Any) -> None:
        """Gather the unit (before its forward, and again before its backward)."""
        send = unit.local_shards(unit.param_dtype)  # (S,): cast BEFORE sending (bf16: half)
        recv = send.new_empty(unit.world * send.numel())  # (K*S,)
        dist.all_gather_single(recv, send, group=group)
        unit.unpack(recv)

    @staticmethod
    def post_backward(unit: Unit, group: Any) -> None:
        """Reduce-scatter the unit's gradients (mean over ranks) into the shards; free it."""
        send = unit.pack_grads(unit.reduce_dtype)  # (K*S_g,)
        recv = send.new_empty(send.numel() // unit.world)  # (S_g,)
        dist.reduce_scatter_single(recv, send, op=AVG, group=group)
        unit.accumulate_grads(recv)
        unit.free()


class FSDP(nn.Module):
    """ZeRO-3 data parallelism over ``group``: wrap once, then train as usual.

    policy: a module class (or tuple of classes), a function (name, module) -> bool, None for
    the lab models' blocks / layers, or () for the whole model as one unit; the root unit takes
    the parameters no other unit took. reshard_after_forward=False keeps non-root units gathered
    from forward to backward (ZeRO-2's traffic). prefetch: issue the next unit's all-gather
    (async) before the current unit computes, in forward and backward.
    replicate: parameters NOT worth sharding (small norm weights and biases): a function
    (name, parameter) -> bool or a collection of names. They stay whole on every rank, as in
    DDP, and their gradients are all-reduced (averaged) in one collective at the end of
    backward. torch's ``fully_shard(..., ignored_params=...)`` also leaves them whole but
    neither casts nor reduces them: that all-reduce is the user's (lab 05).
    """

    def __init__(
        self,
        model: nn.Module,
        group: Any = None,
        policy: Any = None,
        mp: MixedPrecision = MixedPrecision(),
        reshard_after_forward: bool = True,
        prefetch: bool = False,
        hooks: type = UnitHooks,
        replicate: Any = (),
    ) -> None:
        super().__init__()
        check_model(model)
        self.module, self.hooks, self.prefetch, self.sync = model, hooks, prefetch, True
        self.group = group  # None: the default group, never held (data_parallel's docstring)
        self.world, self.rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        self.replicated = _replicated(model, replicate, mp)
        self.units = build_units(
            model,
            policy,
            self.world,
            self.rank,
            mp.param_dtype,
            mp.reduce_dtype,
            reshard_after_forward,
            frozenset(id(p) for p in self.replicated.values()),
        )
        self.root = self.units[0]
        self.cast_inputs = self.root.param_dtype != next(iter(self.parameters())).dtype
        WRAPPED.add(model)
        for unit in self.units:
            unit.module.register_forward_pre_hook(functools.partial(self._pre_forward, unit))
            unit.module.register_forward_hook(functools.partial(self._post_forward, unit))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def set_requires_gradient_sync(self, sync: bool) -> None:
        """False: backward keeps each unit's full gradient and adds the next micro-batch's into
        it, with no reduce-scatter (torch: the same method); the last micro-batch runs with True."""
        self.sync = sync

    # ---- hooks -------------------------------------------------------------------------------
    def _unshard(self, unit: Unit) -> None:
        if unit.inflight is not None:  # prefetched: wait for it now
            (work, recv), unit.inflight = unit.inflight, None
            work.wait()
            unit.unpack(recv)
        elif unit.params and not unit.gathered:
            self.hooks.pre_forward(unit, self.group)

    def _prefetch(self, unit: Unit | None) -> None:
        """Start ``unit``'s all-gather now (async) so it can overlap the current compute."""
        if unit is None or not unit.params or unit.gathered or unit.inflight is not None:
            return
        send = unit.local_shards(unit.param_dtype)
        recv = send.new_empty(self.world * send.numel())
        unit.inflight = (dist.all_gather_single(recv, send, group=self.group, async_op=True), recv)

    def _neighbour(self, unit: Unit, step: int) -> Unit | None:
        i = self.units.index(unit) + step
        return self.units[i] if 0 < i < len(self.units) else None  # units[0] is the root

    def _pre_forward(self, unit: Unit, _module: nn.Module, args: tuple) -> tuple:
        self._unshard(unit)
        if self.prefetch:
            self._prefetch(self._neighbour(unit, +1))
        if self.cast_inputs:  # as torch's cast_forward_inputs
            args = tuple(
                a.to(unit.param_dtype) if torch.is_tensor(a) and a.is_floating_point() else a
                for a in args
            )
        if not torch.is_grad_enabled():
            return args
        watched = []
        for a in args:
            if isinstance(a, torch.Tensor) and a.requires_grad:
                # The unit reads a fresh view: its gradient is ready once the unit's WHOLE
                # backward is done (parameter gradients included): then reduce-scatter.
                a = a.view_as(a)
                a.register_hook(lambda _g, unit=unit: self._input_grad_ready(unit))
                unit.waiting += 1
            watched.append(a)
        return tuple(watched)

    def _post_forward(self, unit: Unit, _module: nn.Module, _args: tuple, out: Any) -> None:
        if not torch.is_grad_enabled():  # no backward will come: free every unit, root too
            unit.free()
            return
        if unit.reshard_after_forward and unit is not self.root:
            unit.free()
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                # runs when d loss / d out is ready, i.e. just before this unit's backward
                t.register_hook(lambda _g, unit=unit: self._pre_backward(unit))

    # The three backward hooks launch collectives: none may carry a Python object (backward_tls.py)
    @without_autograd_context
    def _pre_backward(self, unit: Unit) -> None:
        if unit.in_backward:
            return
        unit.in_backward = True
        if unit is self.root:  # the engine calls this when the whole backward is over
            torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
        self._unshard(unit)
        if self.prefetch:
            self._prefetch(self._neighbour(unit, -1) if unit is not self.root else self.units[-1])

    @without_autograd_context
    def _input_grad_ready(self, unit: Unit) -> None:
        unit.waiting -= 1
        if unit.waiting == 0:
            self._post_backward(unit)

    def _post_backward(self, unit: Unit) -> None:
        if unit.reduced:
            return
        unit.reduced = True
        if self.sync and unit.trainable:
            self.hooks.post_backward(unit, self.group)
        else:  # frozen, or no_sync: the full gradients stay and the next backward adds to them
            unit.free()

    @without_autograd_context
    def _finish_backward(self) -> None:
        """End of backward: units whose input needs no gradient (the root, a first layer
        reading data) are reduced now; anything still gathered or in flight is freed."""
        if self.sync and any(p.grad is not None for p in self.replicated.values()):
            grads = [p.grad for p in self.replicated.values() if p.grad is not None]
            all_reduce_flat(grads, AVG, self.group)  # one all-reduce for all of them
        for unit in self.units:
            if unit.in_backward and not unit.reduced:
                self._post_backward(unit)
            if unit.inflight is not None:
                unit.inflight[0].wait()
                unit.inflight = None
            if unit.params and unit.gathered:
                unit.free()
            unit.in_backward, unit.reduced, unit.waiting = False, False, 0

    # ---- checkpoints ----------------------------------------------------------------------------
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Collective: every rank gets every parameter (gathered in the shards' dtype) and
        buffer, named as in the unwrapped model's state_dict()."""
        out: dict[str, torch.Tensor] = {}
        for unit in (u for u in self.units if u.params):
            send = unit.local_shards(unit.params[0].shard.dtype)
            recv = send.new_empty(self.world * send.numel())
            dist.all_gather_single(recv, send, group=self.group)
            for p, value in zip(unit.params, unit.split_gathered(recv)):
                out.update({name: value.clone() for name in p.names})
        out.update({k: p.detach().clone() for k, p in self.replicated.items()})
        out.update({k: b.detach().clone() for k, b in self.module.named_buffers()})
        return out


def _replicated(model: nn.Module, replicate: Any, mp: MixedPrecision) -> dict[str, nn.Parameter]:
    """name -> parameter for the parameters FSDP keeps whole (see FSDP's ``replicate``)."""
    named = dict(model.named_parameters())
    if callable(replicate):
        chosen = {n: p for n, p in named.items() if replicate(n, p)}
    else:
        unknown = sorted(set(replicate) - set(named))
        if unknown:
            raise ValueError(
                f"replicate names {unknown}: not parameters of "
                f"{type(model).__name__} (e.g. {sorted(named)[:3]})"
            )
        chosen = {n: named[n] for n in replicate}
    dtypes = {p.dtype for p in named.values()}
    if chosen and mp.param_dtype is not None and {mp.param_dtype} != dtypes:
        raise ValueError(
            "replicate= with mixed precision: the replicated parameters would stay "
            f"in {sorted(map(str, dtypes))} while the units compute in "
            f"{mp.param_dtype}; use one or the other"
        )
    return chosen


def clip_grad_norm_(
    parameters: Any, max_norm: float, group: Any = None, replicated: Any = ()
) -> torch.Tensor:
    """Clip SHARDED gradients by the global norm. Each rank holds 1/K of every gradient, so the
    squares are summed over ranks (one all-reduce of 4 bytes; padding adds zeros). torch's
    clip_grad_norm_ on these plain-tensor shards would see this rank's part only. Parameters in
    ``replicated`` (an FSDP's ``replicated.values()``) are whole on every rank: counted once."""
    whole = {id(p) for p in replicated}
    params = [p for p in parameters if p.grad is not None]

    def sq(ps):
        return (
            torch.stack([p.grad.float().pow(2).sum() for p in ps]).sum() if ps else torch.zeros(())
        )

    squares = sq([p for p in params if id(p) not in whole])
    dist.all_reduce(squares, op=dist.ReduceOp.SUM, group=group)
    total = (squares + sq([p for p in params if id(p) in whole])).sqrt()
    grads = [p.grad for p in params]
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)  # torch's rule
    for g in grads:
        g.mul_(scale.to(g.dtype))
    return total
