"""When two runs must log the same numbers: the rounding bound of a reduction, and the loss a
data-parallel job logs from its ranks' losses (lab 14).

A sum of n floats in ANY order is within gamma_n of the exact sum, relative to the sum of the
terms' magnitudes (Higham 2002, "Accuracy and Stability of Numerical Algorithms", Lemma 3.1):

    gamma_n = n u / (1 - n u),      u = 2^-(M+1) the unit roundoff (fp32: M = 23 stored bits)

so two correct runs that reduce in different orders agree to about gamma_n, not bitwise.

The loss of a data-parallel step over ranks r with S_r = the sum of per-token losses over rank r's
real tokens and N_r = their number:

    global      sum_r S_r / sum_r N_r        (= the one-process loss on the same global batch)
    per_rank    mean_r (S_r / N_r)           (equal to it only when every N_r is the same)

The per-rank mean is the bug fixed in torchtitan PR #2206 and open-instruct #1728.
"""

from __future__ import annotations

from collections.abc import Sequence

from lab_utils.calc._check import choice, nonneg_int, nonneg_num, sequence, whole


def reduction_bound(n: int, mant_bits: int = 23) -> float:
    """gamma_n = n u / (1 - n u), u = 2^-(mant_bits + 1): the relative error bound of a sum of n
    terms in any order, relative to the sum of their magnitudes (Higham 2002, Lemma 3.1).
    fp32: mant_bits 23; bf16: 7; fp64: 52. Lab 14."""
    n = whole("n", n, lo=1)
    mant_bits = whole("mant_bits", mant_bits, lo=1, hi=112)
    u = 2.0 ** -(mant_bits + 1)
    if n * u >= 1:
        raise ValueError(
            f"n={n} terms at mant_bits={mant_bits}: n u >= 1, the bound is void "
            "(the sum can lose every digit)"
        )
    return n * u / (1 - n * u)


def logged_loss(
    token_sums: Sequence[float], token_counts: Sequence[int], how: str = "global"
) -> float:
    """The loss a data-parallel step logs from each rank's summed per-token loss S_r and count of
    real tokens N_r: "global" sum S / sum N (the one-process loss), "per_rank" mean of S_r / N_r.
    Lab 14."""
    sums = sequence("token_sums", token_sums, nonneg_num, min_len=1)
    counts = sequence("token_counts", token_counts, nonneg_int, min_len=1)
    how = choice("how", how, ("global", "per_rank"))
    if len(sums) != len(counts):
        raise ValueError(
            f"token_sums has {len(sums)} ranks, token_counts {len(counts)}: give "
            "one of each per rank"
        )
    if how == "global":
        if sum(counts) == 0:
            raise ValueError("token_counts are all 0: no real token, no loss")
        return sum(sums) / sum(counts)
    if 0 in counts:
        raise ValueError(
            "token_counts has a rank with 0 real tokens: its per-rank mean is 0/0 "
            "(one more reason to use the global mean)"
        )
    return sum(s / c for s, c in zip(sums, counts)) / len(sums)
