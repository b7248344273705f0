"""Ulysses, all-gather-KV and zig-zag (lab_utils.parallel.context_variants) beside the ring.

One launch of 4 ranks: CP groups of 2 and 4, causal and not. Every variant's output and q/k/v
gradients must match full attention on one rank; the ledger's bytes and the bytes autograd
saved must equal calc.context_parallel's formulas on every rank.
"""

import pytest

from lab_utils import calc, run
from lab_utils.experiments.lab08.cp import VARIANTS, compare_cp, ulysses_head_limit

B, H, T, HD = 2, 4, 32, 8


def test_formulas_by_hand():
    blk = B * H * (T // 4) * HD * 4
    assert calc.cp_bytes_per_rank("ulysses", B, H, T, HD, 4) == calc.CPBytes(3 * blk, 3 * blk)
    assert calc.cp_bytes_per_rank("allgather_kv", B, H, T, HD, 4) == calc.CPBytes(6 * blk, 6 * blk)
    assert calc.cp_bytes_per_rank("ring", B, H, T, HD, 4) == calc.CPBytes(6 * blk, 14 * blk)
    contiguous = [calc.cp_causal_pairs("allgather_kv", H, T, 4, r) for r in range(4)]
    zigzag = [calc.cp_causal_pairs("allgather_kv", H, T, 4, r, zigzag=True) for r in range(4)]
    assert contiguous == [H * (r + 1) * 8**2 for r in range(4)]  # rank 3 works 4x rank 0
    assert zigzag == [H * 9 * 4**2] * 4  # 2N+1 = 9 half-chunks of 4 tokens on every rank
    ulysses = calc.cp_causal_pairs("ulysses", H, T, 4, 2)
    assert ulysses * 4 == sum(contiguous)  # the same blocks, spread evenly by head
    with pytest.raises(ValueError, match="heads"):
        calc.cp_bytes_per_rank("ulysses", B, 6, T, HD, 4)


def test_variants_match_full_attention():
    rows = [
        row
        for rank_rows in run(
            compare_cp,
            4,
            (2, 4),
            B,
            H,
            T,
            HD,
            timeout_s=180,
            quiet=True,
            preload=("torch._dynamo",),
        )
        for row in rank_rows
    ]
    assert {(r.variant, r.n, r.causal) for r in rows} == {
        (v, n, c) for v in VARIANTS for n in (2, 4) for c in (True, False)
    }
    for r in rows:
        where = (r.variant, r.n, r.causal, r.rank)
        for what, err in r.err.items():
            assert err < 1e-5, (*where, what, err)
        assert r.sent == {k: float(v) for k, v in r.formula.items()}, where
        assert r.saved == r.saved_formula, where
    n4 = [r for r in rows if r.n == 4 and r.causal and r.rank < 4]
    pairs = {v: [r.pairs for r in n4 if r.variant == v] for v in VARIANTS}
    assert max(pairs["allgather_kv"]) == 4 * min(pairs["allgather_kv"])
    assert len(set(pairs["allgather_kv zig-zag"])) == 1 and len(set(pairs["ulysses"])) == 1


def test_ulysses_names_its_head_limit():
    msg = run(ulysses_head_limit, 4, 4, 6, timeout_s=60, quiet=True)[0]
    assert "heads=6" in msg and "N=4" in msg
