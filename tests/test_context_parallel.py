"""Ring attention (lab_utils.parallel.context_parallel) against full attention, at 2 and 4 ranks.

One launch of 4 ranks: two rings of 2 and one ring of 4, causal and not. Output and the
gradients of q, k and v must match full attention on one rank; the bytes each rank sends must
equal the formula (N-1) x (K, V) forward, plus N x (dK, dV) backward.
"""

import torch
import torch.nn.functional as F
from torch.testing import assert_close

from lab_utils import run
from lab_utils.experiments.lab08.ring import check_ring
from lab_utils.parallel.context_parallel import full_attention, kv_block_bytes, ring_bytes

B, H, T, HD = 2, 2, 32, 8


def test_full_attention_is_the_textbook_one():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, H, T, HD, generator=g) for _ in range(3))
    for causal in (True, False):
        assert_close(
            full_attention(q, k, v, causal),
            F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        )


def test_ring_bytes_formula():
    blk = kv_block_bytes(B, H, T, HD, 4)
    assert blk == B * H * (T // 4) * HD * 4
    assert ring_bytes(B, H, T, HD, 4) == {"forward": 3 * 2 * blk, "backward": 7 * 2 * blk}
    assert ring_bytes(B, H, T, HD, 1) == {"forward": 0, "backward": 0}


def test_ring_attention_matches_full_attention():
    res = run(
        check_ring, 4, (2, 4), B, H, T, HD, timeout_s=180, quiet=True, preload=("torch._dynamo",)
    )  # imported by every rank otherwise (~2 s CPU each)
    rows = [row for rank_rows in res for row in rank_rows]
    assert {(r.n, r.causal) for r in rows} == {(2, True), (2, False), (4, True), (4, False)}
    for r in rows:
        for what, err in r.err.items():
            assert err < 1e-5, (r.n, r.causal, r.rank, what, err)
        assert r.sent == {k: float(v) for k, v in r.formula.items()}
        assert r.sends == {"forward": r.n - 1, "backward": 2 * r.n - 1}
        # autograd keeps this rank's q, k, v, out chunks and the log-sum-exp, nothing (Tc, T)
        blk = kv_block_bytes(B, H, T, HD, r.n)
        assert r.saved == 4 * blk + B * H * (T // r.n) * 4
        assert r.saved_full > B * H * T * T * 4  # full attention keeps the (T, T) probabilities
