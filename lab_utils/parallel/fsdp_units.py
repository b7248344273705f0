"""The data layout of FSDP (lab 05): how a unit's parameters are cut into shards, gathered
back and reduced. ``fsdp.py`` holds the module and its hooks; this file the pieces they move.

Layout, as torch's fully_shard: every parameter is cut along dim 0 into K chunks of
ceil(dim0 / K) rows (zero-padded at the end); rank r keeps chunk r as a flat (chunk,) tensor,
its SHARD (an nn.Parameter, in the model's dtype: the master weights). A unit's all-gather
input is the concatenation of this rank's chunks, (S,), S = sum of the chunks; the output,
(K, S), holds rank r's chunks in row r, so a full parameter is its column block, unpadded:

    rank 0 sends [w0 b0]  ->  row 0: [w0 b0]      w = cat(w0, w1)[:numel].view(shape)
    rank 1 sends [w1 b1]  ->  row 1: [w1 b1]      b = cat(b0, b1)[:numel].view(shape)

The reduce-scatter input is built the other way round (``pack_grads``): row r = chunk r of
every gradient, so rank r receives exactly the rows of its shards.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lab_utils.parallel.zero import default_units

WRAPPED: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()  # models an FSDP already wraps


@dataclass(eq=False)
class ShardedParam:
    names: list[str]  # its state_dict names (two for a tied weight)
    owners: list[tuple[nn.Module, str]]  # (module, attribute) holding it
    shape: torch.Size
    chunk: int  # elements per rank: ceil(dim0 / K) rows
    shard: nn.Parameter  # (chunk,) this rank's rows, in the model's dtype: what the optimizer steps
    full: nn.Parameter  # `shape`, param_dtype: used in compute; storage freed while sharded


@dataclass(eq=False)
class Unit:
    """One unit: its parameters are gathered, reduced and freed together (one collective each)."""

    name: str
    module: nn.Module
    params: list[ShardedParam]
    world: int
    param_dtype: torch.dtype
    reduce_dtype: torch.dtype
    reshard_after_forward: bool
    inflight: Any = None  # a prefetched all-gather: (work, receive buffer)
    in_backward: bool = False  # its pre-backward ran in this backward
    waiting: int = 0  # inputs whose gradient has not been computed yet in this backward
    reduced: bool = False  # its post-backward ran in this backward

    @property
    def trainable(self) -> list[ShardedParam]:
        return [p for p in self.params if p.full.requires_grad]

    @property
    def gathered(self) -> bool:
        return all(p.full.untyped_storage().nbytes() > 0 for p in self.params)

    def local_shards(self, dtype: torch.dtype) -> torch.Tensor:
        """(S,) this rank's chunk of every parameter, cast to ``dtype``: the all-gather input."""
        return torch.cat([p.shard.detach().to(dtype) for p in self.params])

    def split_gathered(self, gathered: torch.Tensor) -> list[torch.Tensor]:
        """(K*S,) all-gather output, row r = rank r's chunks -> each full parameter (a copy)."""
        rows = gathered.view(self.world, -1)  # (K, S)
        cols = rows.split([p.chunk for p in self.params], dim=1)  # (K, chunk) per parameter
        return [c.reshape(-1)[: p.shape.numel()].view(p.shape) for p, c in zip(self.params, cols)]

    def unpack(self, gathered: torch.Tensor) -> None:
        """Re-allocate the full parameters, fill them from the all-gather output, use them."""
        for p, value in zip(self.params, self.split_gathered(gathered)):
            p.full.untyped_storage().resize_(value.numel() * p.full.element_size())
            # .data: the same storage refilled; autograd's saved copies see the data again
            p.full.data.copy_(value)
        self._show(full=True)

    def pack_grads(self, dtype: torch.dtype) -> torch.Tensor:
        """(K*S_g,) the trainable parameters' gradients in ``dtype``, padded, rank-major (row r =
        chunk r of each): the reduce-scatter input. A parameter without a gradient adds zeros."""
        rows = []
        for p in self.trainable:
            flat = torch.zeros(self.world * p.chunk, dtype=dtype, device=p.shard.device)
            if p.full.grad is not None:
                flat[: p.shape.numel()] = p.full.grad.reshape(-1)  # cast to dtype here
            rows.append(flat.view(self.world, p.chunk))
        return torch.cat(rows, dim=1).reshape(-1)

    def accumulate_grads(self, reduced: torch.Tensor) -> None:
        """(S_g,) my chunk of the reduced gradients -> the shards' .grad, ADDED (micro-batches
        accumulate, as with plain tensors); the full gradients are dropped."""
        for p, g in zip(self.trainable, reduced.split([p.chunk for p in self.trainable])):
            if p.shard.grad is None:
                p.shard.grad = g.to(p.shard.dtype, copy=True)  # its own storage
            else:
                p.shard.grad.add_(g)
            p.full.grad = None

    def free(self) -> None:
        """Release the full parameters' memory; the modules hold their shards again."""
        for p in self.params:
            p.full.untyped_storage().resize_(0)
        self._show(full=False)

    def _show(self, full: bool) -> None:
        for p in self.params:
            for module, attr in p.owners:
                module._parameters[attr] = p.full if full else p.shard


# ---- set-up: validation and units ----------------------------------------------------------------
def check_model(model: nn.Module) -> None:
    if any(m in WRAPPED for m in model.modules()):
        raise ValueError(
            "this model is already wrapped by FSDP: wrap a model once (its "
            "parameters are already shards)"
        )
    params = dict(model.named_parameters())
    if not params:
        raise ValueError(f"{type(model).__name__} has no parameters: nothing to shard")
    if any(type(p).__name__ == "DTensor" for p in params.values()):
        raise ValueError(
            "this model's parameters are DTensors: it was already sharded with "
            "torch's fully_shard (or parallelize_module); use one FSDP"
        )
    for what in ("dtype", "device"):
        first: dict[str, str] = {}  # kind -> the first parameter of that kind
        for name, p in params.items():
            first.setdefault(str(getattr(p, what)), name)
        if len(first) > 1:
            listed = ", ".join(f"{n} is {k}" for k, n in first.items())
            raise ValueError(
                f"parameters on different {what}s ({listed}): a unit is gathered "
                f"in ONE collective; move the model to one {what} first"
            )
    p = next(iter(params.values()))
    if p.device.type == "meta" or not p.is_floating_point():
        raise ValueError(
            f"parameters must be real floating-point tensors, got {p.dtype} on "
            f"{p.device}: materialise the model (to_empty + init) before wrapping"
        )


def _select(model: nn.Module, policy: Any) -> list[tuple[str, nn.Module]]:
    """The modules the policy makes units of (the root comes on top of these)."""
    if policy is None:
        return [(n, m) for n, m in default_units(model) if m is not model]
    if isinstance(policy, tuple) and not policy:
        return []
    if isinstance(policy, (type, tuple)):
        classes = policy
        policy = lambda _name, module: isinstance(module, classes)  # noqa: E731
    elif not callable(policy):
        raise TypeError(
            f"policy must be a module class, a tuple of classes, a function "
            f"(name, module) -> bool, None or (); got {policy!r}"
        )
    chosen = [(n, m) for n, m in model.named_modules() if m is not model and policy(n, m)]
    if not chosen:
        kinds = ", ".join(sorted({type(m).__name__ for m in model.modules()}))
        raise ValueError(
            f"the unit policy matched no submodule of {type(model).__name__} (its "
            f"modules: {kinds}); pass policy=() to make the whole model one unit"
        )
    return chosen


def build_units(
    model: nn.Module,
    policy: Any,
    world: int,
    rank: int,
    param_dtype: torch.dtype | None,
    reduce_dtype: torch.dtype | None,
    reshard: bool,
    keep: frozenset[int] = frozenset(),
) -> list[Unit]:
    """Units in forward order, the root first. A parameter joins the innermost unit around
    the module(s) holding it; a weight tied across two units is refused. Parameters whose id
    is in ``keep`` join no unit: they stay whole in the model (replicated)."""
    chosen = [("root", model)] + _select(model, policy)
    unit_of = {}  # module -> the innermost chosen unit around it (pre-order: inner ones last)
    for name, module in chosen:
        unit_of.update({id(m): name for m in module.modules()})
    owners: dict[int, tuple[nn.Parameter, list]] = {}  # a tied weight has several owners
    for m in model.modules():
        for attr, p in m._parameters.items():
            if p is not None:
                owners.setdefault(id(p), (p, []))[1].append((m, attr))
    fqn = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
    members: dict[str, list[ShardedParam]] = {name: [] for name, _ in chosen}
    param_dtype = param_dtype or next(model.parameters()).dtype
    for p, where in owners.values():
        if id(p) in keep:
            continue
        names = [f"{fqn[id(m)]}.{attr}".lstrip(".") for m, attr in where]
        units = {unit_of[id(m)] for m, _ in where}
        if len(units) > 1:
            raise ValueError(
                f"{' and '.join(names)} share one parameter (tied weights) but "
                f"sit in units {sorted(units)}: put them in one unit"
            )
        members[units.pop()].append(_shard(p, where, names, world, rank, param_dtype))
    out = []
    for name, module in chosen:
        unit = Unit(
            name,
            module,
            members[name],
            world,
            param_dtype,
            reduce_dtype or param_dtype,
            reshard and module is not model,
        )
        if unit.params or module is model:
            unit.free()  # sharded from the start: only the shards are in memory
            out.append(unit)
    return out


def _shard(
    p: nn.Parameter,
    owners: list[tuple[nn.Module, str]],
    names: list[str],
    world: int,
    rank: int,
    param_dtype: torch.dtype,
) -> ShardedParam:
    """Rank ``rank``'s rows of ``p`` (a copy; p itself is dropped) and an empty full tensor."""
    rows = p.shape[0] if p.dim() else 1
    chunk = -(-rows // world) * (p.numel() // max(rows, 1))  # ceil(dim0 / K) rows per rank
    padded = torch.zeros(world * chunk, dtype=p.dtype, device=p.device)  # (K * chunk,)
    padded[: p.numel()] = p.detach().reshape(-1)
    shard = nn.Parameter(padded[rank * chunk : (rank + 1) * chunk].clone(), p.requires_grad)
    full = nn.Parameter(torch.empty(p.shape, dtype=param_dtype, device=p.device), p.requires_grad)
    return ShardedParam(names, owners, p.shape, chunk, shard, full)
