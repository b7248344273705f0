"""Is a reassembled tensor the reference's, up to rounding? And if not, what kind of wrong? (lab 14)

The bound (a formula, not a tolerance picked to pass): summing n terms in a format with unit
roundoff u errs by at most gamma_n = n u / (1 - n u) times the sum of the terms' magnitudes
(Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 2002, Lemma 3.1 and section
4.2). The reference runs in float64 (u = 1.1e-16), so its own error is negligible; the
distributed run's dtype gives u (float32: 6.0e-8, bfloat16: 3.9e-3); n is the step's longest
chain of additions (the Case's ``reduction_size``: the tokens summed into a weight gradient plus
the fan-ins along the deepest path, times the ranks a reduction spans); max |reference| stands
in for the sum of magnitudes. A bug is a wrong formula, not a rounding: it misses by a factor
(x N, 1/K), by a mask or by a shard, orders of magnitude above this bound.

Diagnosis of a tensor beyond the bound, first match wins:
    non-finite            NaN / inf on some ranks
    replicas disagree     copies that must be equal are not: a missing reduction (or a
                          random stream that differs where it must not)
    off by a factor k     x = k * reference within the bound's tolerance: k = N is a SUM
                          where the reference takes a mean (an extra reduction), 1/N a
                          missing one or a mean taken twice
    a different value     a scalar (a loss, a norm) off by no whole factor: another weighting
    differs               anything else (a mask, a wrong shard, wrong data)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lab_utils.calc.equivalence import reduction_bound
from lab_utils.correctness.layout import Replica


def error_bound(dtype: torch.dtype, n: int, scale: float) -> float:
    """gamma_n(dtype) * scale (Higham 2002, Lemma 3.1): the most n additions can drift
    (gamma_n itself is ``calc.reduction_bound``, the one formula)."""
    mant_bits = round(-math.log2(torch.finfo(dtype).eps))
    return reduction_bound(n, mant_bits) * scale


@dataclass
class Divergence:
    """A tensor that does not match the reference."""

    op: str  # the event key: "forward fc1", "loss", "grad head.weight", ...
    ranks: tuple[int, ...]  # the ranks whose replica is wrong
    max_abs_err: float
    rel_err: float  # max_abs_err / max |reference|
    bound: float  # error_bound for this tensor (absolute)
    diagnosis: str
    factor: float | None = None  # x = factor * reference, when it is a whole multiple or part

    def __str__(self) -> str:
        return (
            f"{self.op}: ranks {list(self.ranks)}, max |error| {self.max_abs_err:.3g} "
            f"({self.rel_err:.3g} of max |ref|; bound {self.bound:.3g}): {self.diagnosis}"
        )


def _factor(x: torch.Tensor, ref: torch.Tensor, bound: float) -> float | None:
    """k if x = k * ref up to the bound (scaled by k), else None."""
    denom = float((ref * ref).sum())
    if denom == 0:
        return None
    if ref.numel() == 1:  # a scalar is always a multiple of another: only whole factors count
        k = float(x.reshape(-1)[0]) / float(ref.reshape(-1)[0])
        whole = [m for m in (k, 1 / k if k else 0.0) if m > 1 and abs(m - round(m)) < 1e-3 * m]
        return k if whole else None
    k = float((x * ref).sum()) / denom
    fits = float((x - k * ref).abs().max()) <= max(abs(k), 1.0) * bound * 4
    return k if fits and abs(k - 1) > 1e-3 else None


def _name_factor(k: float) -> str:
    if k > 1 and abs(k - round(k)) < 1e-3 * k:
        return (
            f"exactly {round(k)} x the reference: an extra reduction (a SUM where the "
            f"reference takes a mean over {round(k)} ranks or micro-batches)"
        )
    inv = 1 / k if k else 0
    if inv > 1 and abs(inv - round(inv)) < 1e-3 * inv:
        return (
            f"exactly 1/{round(inv)} of the reference: a missing reduction, or a mean "
            f"taken twice over {round(inv)} ranks or micro-batches"
        )
    return f"{k:.4g} x the reference (a scale, not a rounding)"


def compare(
    op: str, ref: torch.Tensor, replicas: list[Replica], dtype: torch.dtype, n: int
) -> tuple[Divergence | None, float]:
    """(the divergence or None, the worst error / bound over the replicas)."""
    scale = max(float(ref.abs().max()) if ref.numel() else 0.0, torch.finfo(dtype).tiny)
    bound = error_bound(dtype, n, scale)
    errs = [float((x - ref).abs().max()) if x.numel() else 0.0 for x, _ in replicas]
    bad = [i for i, e in enumerate(errs) if not e <= bound]  # NaN counts as bad
    worst = max(errs, default=0.0) / bound
    if not bad:
        return None, worst
    ranks, factor = tuple(r for i in bad for r in replicas[i][1]), None
    err = max(errs[i] for i in bad)
    x0 = replicas[bad[0]][0]
    if not all(torch.isfinite(replicas[i][0]).all() for i in bad):
        why = "non-finite values (NaN or inf) where the reference is finite"
    elif any(float((x - x0).abs().max()) > bound for x, _ in replicas):
        good = [r for i, (_, rs) in enumerate(replicas) if i not in bad for r in rs]
        why = (
            f"replicas disagree: ranks {good or 'none'} match the reference, ranks "
            f"{list(ranks)} do not (a missing reduction or sync, or a random stream that "
            "differs where it must be equal)"
        )
    elif (k := _factor(x0, ref, bound)) is not None:
        why, factor = _name_factor(k), k
    elif ref.numel() == 1:
        why = "a different value: another weighting or normalisation, not a rounding"
    else:
        why = "differs (not a rounding and not a scale: a mask, a shard or data mixed up)"
    return Divergence(op, ranks, err, err / scale, bound, why, factor), worst
