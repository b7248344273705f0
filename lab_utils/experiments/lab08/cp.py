"""Lab 08's context-parallel variants on real ranks: ring, Ulysses, all-gather-KV, zig-zag.

    compare_cp(ctx, sizes, ...)   every variant at every CP degree against full attention on one
                                  rank: output and q/k/v gradients, ledger bytes, bytes autograd
                                  saved, next to the formulas of ``calc.context_parallel``

The techniques are ``lab_utils.parallel.context_parallel`` (ring) and
``lab_utils.parallel.context_variants``; measurement stays here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from lab_utils.calc.context_parallel import cp_bytes_per_rank, cp_causal_pairs, cp_saved_bytes
from lab_utils.experiments.lab08.ring import cp_cases
from lab_utils.measure import CommLedger, SavedActivations
from lab_utils.parallel.context_parallel import full_attention, ring_attention
from lab_utils.parallel.context_variants import (
    allgather_kv_attention,
    ulysses_attention,
    zigzag_shard,
)
from lab_utils.topology import Topology

# name -> (calc variant, zig-zag layout?, the attention call)
VARIANTS: dict[str, tuple[str, bool, Callable]] = {
    "ring": ("ring", False, ring_attention),
    "ulysses": ("ulysses", False, ulysses_attention),
    "allgather_kv": ("allgather_kv", False, allgather_kv_attention),
    "allgather_kv zig-zag": (
        "allgather_kv",
        True,
        lambda q, k, v, g, c: allgather_kv_attention(q, k, v, g, c, True),
    ),
}


@dataclass
class CPCheck:
    variant: str
    n: int
    causal: bool
    rank: int
    err: dict[str, float]  # max |variant - full| of out, dq, dk, dv
    sent: dict[str, float]  # ledger bytes by phase
    formula: dict[str, int]  # calc.cp_bytes_per_rank
    saved: int  # bytes autograd kept (SavedActivations)
    saved_formula: int  # calc.cp_saved_bytes
    pairs: int  # causal (query, key) pairs this rank scores per batch row (formula)


def _mine(x: torch.Tensor, me: int, n: int, zigzag: bool) -> torch.Tensor:
    """This rank's share of the sequence dim (2): contiguous chunk, or zig-zag chunks."""
    return zigzag_shard(x, me, n) if zigzag else x.chunk(n, dim=2)[me]


def compare_cp(
    ctx: Any,
    sizes: tuple[int, ...] = (2, 4),
    B: int = 2,
    H: int = 4,
    T: int = 32,
    hd: int = 8,
    causal_modes: tuple[bool, ...] = (True, False),
) -> list[CPCheck]:
    """Every variant over CP groups of each size (consecutive ranks: Topology(dp=W/n, tp=n)'s
    groups serve as CP groups here), against full attention on the whole sequence."""
    rows = []
    for n, group, me, causal, (q, k, v, w) in cp_cases(ctx, sizes, (B, H, T, hd), causal_modes):
        ref = [t.clone().requires_grad_() for t in (q, k, v)]
        full = full_attention(*ref, causal=causal)
        (full * w).sum().backward()
        for name, (variant, zz, attend) in VARIANTS.items():
            mine = [_mine(t, me, n, zz).clone().requires_grad_() for t in (q, k, v)]
            with CommLedger() as ledger:
                with ledger.phase("forward"), SavedActivations() as saved:
                    out = attend(*mine, group, causal)
                with ledger.phase("backward"):
                    (out * _mine(w, me, n, zz)).sum().backward()
            err = {"out": (out - _mine(full, me, n, zz)).abs().max().item()}
            for t, a, b in zip("qkv", mine, ref):
                err[f"d{t}"] = (a.grad - _mine(b.grad, me, n, zz)).abs().max().item()
            f = cp_bytes_per_rank(variant, B, H, T, hd, n)
            rows.append(
                CPCheck(
                    name,
                    n,
                    causal,
                    ctx.rank,
                    err,
                    {ph: ledger.bytes_sent(phase=ph) for ph in ("forward", "backward")},
                    {"forward": f.forward, "backward": f.backward},
                    saved.bytes,
                    cp_saved_bytes(variant, B, H, T, hd, n, me, causal, zz),
                    cp_causal_pairs(variant, H, T, n, me, zz),
                )
            )
    return rows


def ulysses_head_limit(ctx: Any, n: int = 4, heads: int = 6) -> str:
    """The message Ulysses raises when the CP degree does not divide the head count."""
    group = Topology(dp=ctx.world_size // n, tp=n).build_groups()["tp"]
    x = torch.zeros(1, heads, 4, 2)
    try:
        ulysses_attention(x, x, x, group)
    except ValueError as e:
        return str(e)
    return "no error"
