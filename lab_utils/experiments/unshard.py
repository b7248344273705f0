"""Gather a tensor-parallel model back to full size, under the unsharded model's names.

A CHECK, not part of the technique (labs 06 and 08, tests/test_tp.py): every from-scratch TP
module is built by slicing an unsharded one, so ``unshard(model)`` (or its gradients) can be
compared with the original parameter by parameter. Collective: all-gathers over each layer's
group, so every rank of the group must call it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.parallel.tensor_parallel import (
    TPMLP,
    ColumnParallelLinear,
    RowParallelLinear,
    TPAttention,
    VocabParallelEmbedding,
    all_gather_along,
)


def _value(p: nn.Parameter, grads: bool) -> torch.Tensor:
    if not grads:
        return p.detach()
    if p.grad is None:
        raise ValueError("a parameter has no .grad: run backward before unshard(grads=True)")
    return p.grad


def _column(lin: ColumnParallelLinear, grads: bool) -> list[dict[str, torch.Tensor]]:
    """Full weight / bias of each source linear of a (possibly fused) column-parallel linear."""
    out = [{} for _ in lin.part_sizes]
    t = dist.get_world_size(lin.group)
    for name, p in (("weight", lin.weight), ("bias", lin.bias)):
        if p is None:
            continue
        pieces = all_gather_along(_value(p, grads), 0, lin.group).chunk(t)  # per rank (N/t, ..)
        for j, rows in enumerate(zip(*[piece.split(lin.part_sizes) for piece in pieces])):
            out[j][name] = torch.cat(rows)
    return out


def _row(lin: RowParallelLinear, grads: bool) -> dict[str, torch.Tensor]:
    out = {"weight": all_gather_along(_value(lin.weight, grads), 1, lin.group)}
    if lin.bias is not None:
        out["bias"] = _value(lin.bias, grads).clone()
    return out


def _full(module: nn.Module, grads: bool) -> dict[str, torch.Tensor] | None:
    """A sharded module's full parameters under the unsharded module's names, or None."""
    prefixed = lambda p, d: {f"{p}.{k}": v for k, v in d.items()}  # noqa: E731
    if isinstance(module, TPAttention):
        q, k, v = _column(module.qkv, grads)
        return (
            prefixed("q", q)
            | prefixed("k", k)
            | prefixed("v", v)
            | prefixed("proj", _row(module.proj, grads))
        )
    if isinstance(module, TPMLP):
        return prefixed("fc", _column(module.fc, grads)[0]) | prefixed(
            "proj", _row(module.proj, grads)
        )
    if isinstance(module, ColumnParallelLinear):
        return _column(module, grads)[0]
    if isinstance(module, RowParallelLinear):
        return _row(module, grads)
    if isinstance(module, VocabParallelEmbedding):
        return {"weight": all_gather_along(_value(module.weight, grads), 0, module.group)}
    return None


def unshard(model: nn.Module, grads: bool = False) -> dict[str, torch.Tensor]:
    """Full (unsharded) parameters, or grads, of a TP model under the ORIGINAL names (e.g.
    "blocks.0.attn.q.weight"), ready for assert_close against the unsharded model. Collective
    (all-gathers over each layer's group): every rank of the group must call it."""
    out, done = {}, []
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if any(prefix.startswith(d) for d in done):
            continue
        full = _full(module, grads)
        if full is not None:
            out |= {prefix + k: v for k, v in full.items()}
            done.append(prefix)
    for name, p in model.named_parameters():
        if not any(name.startswith(d) for d in done):
            out[name] = _value(p, grads).clone()
    return out
