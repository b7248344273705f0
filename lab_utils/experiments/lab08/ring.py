"""Lab 08's context-parallel check: ring attention against full attention on real ranks.

    check_ring(ctx, sizes, ...)   output and q/k/v gradients vs full attention, ledger bytes vs
                                  the formula, and the bytes autograd saved with and without CP
    ring_rows(checks), RING_FMT   those checks as table rows, and how the notebook prints them

The technique is ``lab_utils.parallel.context_parallel``; measurement stays outside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from lab_utils.measure import CommLedger, SavedActivations
from lab_utils.parallel.context_parallel import full_attention, ring_attention, ring_bytes
from lab_utils.topology import Topology


@dataclass
class RingCheck:
    n: int
    causal: bool
    rank: int
    err: dict[str, float]  # max |ring - full| of out, dq, dk, dv
    sent: dict[str, float]  # ledger bytes by phase
    sends: dict[str, int]
    formula: dict[str, int]
    saved: int  # bytes autograd kept: ring (this rank's chunk)
    saved_full: int  # ... and plain attention on the whole sequence


def cp_cases(
    ctx: Any,
    sizes: tuple[int, ...],
    shape: tuple[int, int, int, int],
    causal_modes: tuple[bool, ...],
) -> Iterator[tuple[int, Any, int, bool, tuple]]:
    """(n, group, this rank's index in it, causal, (q, k, v, w)) for every CP group size and mask.
    q, k, v and the loss weights w, of shape (B, H, T, hd), are the same on every rank; groups of
    n consecutive ranks (Topology(dp=W/n, tp=n)'s tp groups) serve as CP groups. Every rank makes
    every group, in the same order."""
    g = torch.Generator().manual_seed(0)
    tensors = tuple(torch.randn(*shape, generator=g) for _ in range(4))
    for n in sizes:
        group = Topology(dp=ctx.world_size // n, tp=n).build_groups()["tp"]
        for causal in causal_modes:
            yield n, group, ctx.rank % n, causal, tensors


def check_ring(
    ctx: Any,
    sizes: tuple[int, ...] = (2, 4),
    B: int = 2,
    H: int = 2,
    T: int = 32,
    hd: int = 8,
    causal_modes: tuple[bool, ...] = (True, False),
) -> list[RingCheck]:
    """Ring attention over rings of each size (consecutive ranks: Topology(dp=N/n, tp=n)'s
    groups serve as rings here), against full attention: output and the gradients of q, k, v,
    the bytes sent and the bytes autograd saved."""
    rows = []
    for n, group, me, causal, (q, k, v, w) in cp_cases(ctx, sizes, (B, H, T, hd), causal_modes):
        ref = [t.clone().requires_grad_() for t in (q, k, v)]
        with SavedActivations() as saved_full:  # what one rank keeps WITHOUT CP
            full = full_attention(*ref, causal=causal)
        (full * w).sum().backward()
        mine = [t.chunk(n, dim=2)[me].clone().requires_grad_() for t in (q, k, v)]
        with CommLedger() as ledger:
            with ledger.phase("forward"), SavedActivations() as saved:
                out = ring_attention(*mine, group, causal)
            with ledger.phase("backward"):
                (out * w.chunk(n, dim=2)[me]).sum().backward()
        with torch.no_grad():
            want = full_attention(q, k, v, causal).chunk(n, dim=2)[me]
        err = {"out": (out - want).abs().max().item()}
        for name, a, b in zip("qkv", mine, ref):
            err[f"d{name}"] = (a.grad - b.grad.chunk(n, dim=2)[me]).abs().max().item()
        phases = ("forward", "backward")
        rows.append(
            RingCheck(
                n,
                causal,
                ctx.rank,
                err,
                {ph: ledger.bytes_sent(phase=ph) for ph in phases},
                {ph: ledger.count("send", ph) for ph in phases},
                ring_bytes(B, H, T, hd, n),
                saved.bytes,
                saved_full.bytes,
            )
        )
    return rows


# how the notebook prints ring_rows: errors in scientific notation, bytes with separators
RING_FMT = {
    **{f"max|Δ{k}|": "{:.1e}" for k in ("out", "dq", "dk", "dv")},
    "fwd bytes": "{:,.0f}",
    "bwd bytes": "{:,.0f}",
}


def ring_rows(checks: Sequence[RingCheck], ranks: Sequence[int] = (0, 3)) -> list[dict]:
    """Lab 08 section on context parallelism: one row per ``RingCheck`` of the listed ranks:
    the errors against full attention, the ledger bytes beside the formula, the bytes saved."""
    return [
        {
            "N": r.n,
            "causal": r.causal,
            "rank": r.rank,
            **{f"max|Δ{k}|": v for k, v in r.err.items()},
            "fwd bytes": r.sent["forward"],
            "formula fwd": r.formula["forward"],
            "bwd bytes": r.sent["backward"],
            "formula bwd": r.formula["backward"],
            "saved (ring)": r.saved,
            "saved (full)": r.saved_full,
        }
        for r in checks
        if r.rank in ranks
    ]
