"""Context parallelism: bytes, saved memory and causal work per rank of each variant (lab 08).

One attention layer, a sequence of T tokens over N ranks, each holding Tc = T/N positions of
q, k, v, shaped (B, H, Tc, hd); blk = B*H*Tc*hd*e bytes (e bytes per element), one of them.
Bytes are what one rank sends under the ring formula of each collective (``calc.comm``):

    ring         forward (N-1) x (K, V) hops          2 (N-1) blk
                 backward (N-1) (K, V) + N (dK, dV)   2 (2N-1) blk   (Liu et al. 2023)
    ulysses      4 all-to-alls each way (q, k, v, out / their grads), (N-1)/N of each buffer:
                 4 (N-1)/N blk forward, the same backward; N must divide H (Jacobs et al. 2023)
    allgather_kv all-gather (K, V) forward, reduce-scatter (dK, dV) backward:
                 2 (N-1) blk each way (Llama 3 paper, Sec. 3.3.2)

Saved for backward (what autograd keeps between forward and backward, flash-style kernels
that keep the log-sum-exp lse = B*H*Tc*e instead of the probabilities):

    ring, ulysses   4 blk + lse          q, k, v, out chunks (Ulysses: head shards, same size)
    allgather_kv    2 blk + 2N blk + lse + mask
                    q, out, the GATHERED K and V (N times a chunk), and the causal mask that
                    torch's CPU kernel materialises, e per (query, key) entry, L x S per call

Causal work: (query, key) pairs a rank scores, counted in whole blocks of its chunk size that
are not entirely in the future (the masked half of a diagonal block counts, as in a flash
kernel's tiles). Contiguous chunks: rank r scores H (r+1) Tc^2, so rank N-1 works N times
rank 0; zig-zag (chunks r and 2N-1-r of 2N): H (2N+1) (T/2N)^2 on every rank; Ulysses: H/N
heads x N(N+1)/2 blocks of Tc^2 = H (N+1)/2 Tc^2 on every rank, the contiguous mean.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import boolean, choice, divides, index, pos_int

CP_VARIANTS = ("ring", "ulysses", "allgather_kv")


@dataclass(frozen=True)
class _Shape:
    """Validated sizes of one context-parallel attention layer."""

    variant: str
    batch: int
    heads: int
    seq_len: int
    head_dim: int
    n: int
    e: int

    @property
    def blk(self) -> int:
        """Bytes of ONE of this rank's q, k, v chunks."""
        return self.batch * self.heads * (self.seq_len // self.n) * self.head_dim * self.e


def _shape(
    variant: object,
    batch: object,
    heads: object,
    seq_len: object,
    head_dim: object,
    n: object,
    bytes_per_elem: object,
    zigzag: object = False,
) -> _Shape:
    v = choice("variant", variant, CP_VARIANTS)
    s = _Shape(
        v,
        pos_int("batch", batch),
        pos_int("heads", heads),
        pos_int("seq_len", seq_len),
        pos_int("head_dim", head_dim),
        pos_int("n", n),
        pos_int("bytes_per_elem", bytes_per_elem),
    )
    chunks = 2 * s.n if boolean("zigzag", zigzag) else s.n
    divides(
        "n" if chunks == s.n else "2n",
        chunks,
        "seq_len",
        s.seq_len,
        "every rank holds the same number of positions",
    )
    if v == "ulysses":
        divides(
            "n",
            s.n,
            "heads",
            s.heads,
            "Ulysses gives each rank H/N whole heads (the CP degree cannot exceed the head count)",
        )
    return s


@dataclass(frozen=True)
class CPBytes:
    forward: int
    backward: int


def cp_bytes_per_rank(
    variant: str,
    batch: int,
    heads: int,
    seq_len: int,
    head_dim: int,
    n: int,
    bytes_per_elem: int = 4,
) -> CPBytes:
    """Bytes one rank sends per attention layer, forward and backward (formulas above).

    ring 2(N-1) / 2(2N-1) blk; ulysses 4(N-1)/N blk each way; allgather_kv 2(N-1) blk each
    way. Sources: Liu et al. 2023 (ring), Jacobs et al. 2023 (Ulysses), Llama 3 Sec. 3.3.2.
    Lab 08 measures them with the CommLedger.
    """
    s = _shape(variant, batch, heads, seq_len, head_dim, n, bytes_per_elem)
    n, blk = s.n, s.blk
    if s.variant == "ring":
        return CPBytes(2 * (n - 1) * blk, 2 * (2 * n - 1) * blk if n > 1 else 0)
    if s.variant == "ulysses":
        b = 4 * (n - 1) * blk // n
        return CPBytes(b, b)
    return CPBytes(2 * (n - 1) * blk, 2 * (n - 1) * blk)


def cp_saved_bytes(
    variant: str,
    batch: int,
    heads: int,
    seq_len: int,
    head_dim: int,
    n: int,
    rank: int = 0,
    causal: bool = True,
    zigzag: bool = False,
    bytes_per_elem: int = 4,
) -> int:
    """Bytes autograd keeps for backward on ``rank`` (formulas above; lab 08 measures them
    with SavedActivations). allgather_kv keeps the gathered K and V, 2N blk, and on CPU the
    causal mask; ring and Ulysses keep 4 blk + lse. zigzag applies to allgather_kv only."""
    s = _shape(variant, batch, heads, seq_len, head_dim, n, bytes_per_elem, zigzag)
    r = index("rank", rank, s.n, f"n={s.n}")
    causal, zigzag = boolean("causal", causal), boolean("zigzag", zigzag)
    if zigzag and s.variant != "allgather_kv":
        raise ValueError(
            f"zigzag=True is modelled for variant='allgather_kv' only, got variant={s.variant!r}"
        )
    tc = s.seq_len // s.n
    lse = s.batch * s.heads * tc * s.e
    if s.variant != "allgather_kv":
        return 4 * s.blk + lse
    if not causal:
        mask = 0
    elif zigzag:
        th = tc // 2
        mask = sum(th * (c + 1) * th for c in (r, 2 * s.n - 1 - r)) * s.e
    else:
        mask = tc * (r + 1) * tc * s.e
    return 2 * s.blk + 2 * s.n * s.blk + lse + mask


def cp_causal_pairs(
    variant: str, heads: int, seq_len: int, n: int, rank: int = 0, zigzag: bool = False
) -> int:
    """Causal (query, key) pairs ``rank`` scores per batch row, in whole blocks not entirely
    in the future: contiguous H (r+1) Tc^2; zig-zag H (2N+1) (T/2N)^2; Ulysses H (N+1)/2 Tc^2
    (above). Lab 08 compares the balance of the variants."""
    s = _shape(variant, 1, heads, seq_len, 1, n, 1, zigzag)
    r = index("rank", rank, s.n, f"n={s.n}")
    tc = s.seq_len // s.n
    if s.variant == "ulysses":
        if boolean("zigzag", zigzag):
            raise ValueError("zigzag=True does not apply to variant='ulysses' (already balanced)")
        return s.heads // s.n * s.n * (s.n + 1) // 2 * tc**2  # H/N heads, N(N+1)/2 blocks
    if zigzag:
        return s.heads * (2 * s.n + 1) * (tc // 2) ** 2
    return s.heads * (r + 1) * tc**2
