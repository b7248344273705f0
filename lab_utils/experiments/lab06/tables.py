"""Lab 06's results as table rows (for lab_utils.viz.show_table): the plumbing that turns what the
ranks returned into the rows the notebook shows, so that its cells keep the calls and the checks.

    check_rows, shape_rows    section 2: TP modules against one process; per-rank shapes
    activation_rows           section 4: saved activations, formula beside measurement
    vocab_rows                the vocabulary-parallel loss, gathered vs split logits
    dtensor_rows, loss_gap    DTensor TP beside ours: collectives and losses, the largest gap
    link_row, place_rows      TP vs PP over a link: by formula, on the emulated cluster
    CLAIMS, claim_rows        the sources' claims beside lab_utils.calc
    share_rows                one rank's MLP share at growing t (thin matmuls)
"""

from __future__ import annotations

from typing import Any, Sequence

from lab_utils.calc import ring_bytes_per_rank


def check_rows(checks: Sequence[Any]) -> list[dict]:
    """Lab 06: one row per BlockCheck; TinyGPT rows take token ids, so their dx is NaN."""

    def dx(c: Any) -> str:
        return "n/a (token ids)" if c.dx != c.dx else f"{c.dx:.1e}"

    return [
        dict(t=c.t, module=c.module, **{"max|Δ out|": c.out, "max|Δ dx|": dx(c), "max|Δ dW|": c.dW})
        for c in checks
    ]


def shape_rows(checks: Sequence[Any], t: int) -> list[dict]:
    """Lab 06: each module's per-rank parameter shapes at tensor-parallel size ``t``."""
    return [
        dict(module=c.module, **{n: str(s) for n, s in c.shapes.items()})
        for c in checks
        if c.t == t and c.shapes
    ]


def activation_rows(mem: Sequence[Any]) -> list[dict]:
    """Lab 06: saved activations (ActivationBytes) by formula and measured, and vs t=1."""
    base = next(m.measured for m in mem if m.t == 1)
    return [
        dict(
            t=m.t,
            SP="yes" if m.sp else "no",
            formula=int(m.formula),
            extras=m.extras,
            measured=m.measured,
            **{"vs t=1": m.measured / base},
        )
        for m in mem
    ]


def vocab_rows(vocab: Sequence[Any]) -> list[dict]:
    """Lab 06: the VocabRun of each loss variant: errors, forward collectives, bytes."""
    return [
        dict(
            loss=v.variant,
            **{"|Δ loss|": v.loss_err, "max|Δ grad|": v.grad_err},
            forward=", ".join(f"{n} {op}" for op, n in v.calls["forward"].items() if n),
            **{
                "ledger fwd": round(v.ledger["forward"]),
                "wire fwd": v.wire["forward"],
                "logits held": v.logits_bytes,
            },
        )
        for v in vocab
    ]


def loss_gap(losses: Sequence[float], reference: Sequence[float]) -> float:
    """Lab 06: the largest |loss - reference loss| over the steps of two runs."""
    return max(abs(a - b) for a, b in zip(losses, reference))


def dtensor_rows(dt: Any) -> list[dict]:
    """Lab 06: one row per model of a DTensorComparison: collectives, first/last loss, gap."""
    steps = len(dt.losses["unsharded"])
    return [
        {
            "model": k,
            "collectives fwd/bwd": f"{dt.calls[k][0]}/{dt.calls[k][1]}",
            "loss step 0": v[0],
            f"loss step {steps - 1}": v[-1],
            "max|Δ loss| vs unsharded": loss_gap(v, dt.losses["unsharded"]),
        }
        for k, v in dt.losses.items()
    ]


def link_row(link: str, tp_s: float, pp_s: float, compute_s: float, layers: int) -> dict:
    """Lab 06: one link's TP time per layer and PP time per stage of ``layers`` layers, in ms and
    as fractions of the compute they would have to hide behind."""
    return {
        "link": link,
        "TP comm / layer": tp_s * 1e3,
        "vs compute": tp_s / compute_s,
        f"PP comm / stage of {layers} layers": pp_s * 1e3,
        "vs stage compute": pp_s / (compute_s * layers),
    }


def place_rows(inside: dict, across: dict, wall: dict) -> list[dict]:
    """Lab 06: the TP and PP step times (seconds) as ms rows, inside vs across nodes (emulated)
    and this machine's wall clock."""
    return [
        {
            "step": k,
            "inside one node": 1e3 * inside[k],
            "across two nodes": 1e3 * across[k],
            "added across nodes": 1e3 * (across[k] - inside[k]),
            "this machine (wall)": 1e3 * wall[k],
        }
        for k in ("TP", "PP")
    ]


# key: (the claim, what the source says, the unit and why the calculator differs)
CLAIMS = {
    "all-reduces": (
        "all-reduces per layer per step",
        "2",
        "forward only; backward has 2 more (the f's)",
    ),
    "bytes": (
        "bytes one GPU sends per forward",
        "~10 GB",
        "GB: the 80 messages summed; a ring all-reduce SENDS 2(t-1)/t of each",
    ),
    "nvlink": (
        "NVLink time per forward",
        "~17 ms",
        "ms: 600 GB/s is both directions (300 each) + ring factor",
    ),
    "compute": (
        "  ... forward compute at peak",
        "hides it",
        "ms: comm is ~30% of it, hidden only if overlapped",
    ),
    "infiniband": ("InfiniBand (50 GB/s) per forward", "~200 ms", "ms: the ring factor again"),
    "per micro-batch": (
        "TP all-reduces per micro-batch, 40 layers",
        "80",
        "fwd + bwd; PP: 2 x 3 = 6 transfers, not 3",
    ),
    "activations": (
        "GPT-3 layer activations, t=8 vs t=1",
        "/ 8",
        "x smaller only: 10sbh stays without SP",
    ),
    "with SP": ("  ... with sequence parallelism", "", "x: SP is what divides all of it by t"),
    "SP bytes": (
        "SP bytes per step vs TP alone (ledger, t=4)",
        "fewer",
        "x: same per collective, + re-gathers, + LN grads",
    ),
}


def claim_rows(calculator: dict[str, float]) -> list[dict]:
    """Lab 06: each of CLAIMS beside the calculator's value under the same key."""
    if missing := set(CLAIMS) ^ set(calculator):
        raise ValueError(f"calculator: keys must be those of CLAIMS; differing: {sorted(missing)}")
    return [
        dict(claim=c, they_say=v, calculator=calculator[k], why=w)
        for k, (c, v, w) in CLAIMS.items()
    ]


def share_rows(shares: Sequence[Any]) -> list[dict]:
    """Lab 06: one row per ShareTiming: time, rate, speedup over t=1 beside the ideal t, and the
    all-reduce bytes per rank as a multiple of the message size D."""
    base = shares[0].seconds
    return [
        {
            "t": sh.t,
            "time": sh.seconds * 1e3,
            "GFLOP/s": sh.gflops,
            "speedup vs t=1": base / sh.seconds,
            "ideal": sh.t,
            "all-reduce bytes/rank (x D)": ring_bytes_per_rank("all_reduce", sh.t, 1),
        }
        for sh in shares
    ]
