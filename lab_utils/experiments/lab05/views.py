"""Lab 05's tables and figures: the rows and styling the notebook shows, out of the learner's sight.

Each function only arranges numbers a run already measured (no computation of its own beyond
ratios): the notebook keeps the run, the comparison it asserts and the prediction's reveal.

    memory_figure(res, rows)         section 5: model state per rank, stacked, calculator marked
    accumulation_table(accum, A)     section 10: one optimizer step of A micro-batches per variant
    zero3_vs_zero2_table(steps, c)   section 7b: ZeRO-3 against ZeRO-2 on the emulated clock
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from lab_utils.viz.table import Table

BUCKETS = ("params", "grads", "optimizer")


def memory_figure(res: dict[str, Any], rows: list[dict]) -> go.Figure:
    """Section 5's bars: each variant's measured params / grads / optimizer bytes on rank 0
    (``res[name].memory``), stacked, with the calculator's total (``row["calculator"]``) as x."""
    names = [r["variant"] for r in rows]
    fig = go.Figure([go.Bar(name=b, x=names, y=[res[n].memory[b] for n in names]) for b in BUCKETS])
    fig.add_scatter(
        name="calculator",
        mode="markers",
        marker=dict(symbol="x", size=12, color="black"),
        x=names,
        y=[r["calculator"] for r in rows],
    )
    return fig.update_layout(
        barmode="stack", title="Model state per rank (fp32 Adam)", yaxis_title="bytes", height=360
    )


def accumulation_table(accum: dict[str, Any], micro: int, base: str = "DDP + no_sync") -> Table:
    """Section 10's table: each variant's collectives and bytes (ledger, wire) for one optimizer
    step of ``micro`` micro-batches, as multiples of ``base``'s, and how far its weights are
    from ``base``'s after the step (relative checksum difference)."""
    ref = accum[base]
    rows = [
        dict(
            variant=n,
            collectives=str(r.calls),
            ledger_bytes=r.ledger_bytes,
            wire_bytes=r.wire,
            vs_DDP=r.ledger_bytes / ref.ledger_bytes,
            wire_vs_DDP=r.wire / ref.wire,
            weights_vs_DDP=abs(r.weights_checksum - ref.weights_checksum)
            / abs(ref.weights_checksum),
        )
        for n, r in accum.items()
    ]
    fmt = {"vs_DDP": "{:.2f}", "wire_vs_DDP": "{:.2f}", "weights_vs_DDP": "{:.1e}"}
    title = f"One optimizer step of A = {micro} micro-batches (ledger)"
    return Table(rows, title=title, fmt=fmt | {"ledger_bytes": "{:,.0f}"})


def zero3_vs_zero2_table(steps: dict[str, Any], cluster: str) -> Table:
    """Section 7b's table: ZeRO-3 (FSDP prefetch) against ZeRO-2 (FSDP keep, prefetch), one
    step each on the emulated clock (``twin.step_points`` rows: step, comm, hidden), in ms."""
    pairs = (
        ("ZeRO-3 (FSDP prefetch)", "FSDP prefetch"),
        ("ZeRO-2 (FSDP keep, prefetch)", "FSDP keep, prefetch"),
    )
    rows = [
        dict(
            variant=label,
            step_ms=1e3 * p.step_s,
            comm_ms=1e3 * p.comm_s,
            hidden_ms=1e3 * p.hidden_s,
        )
        for label, p in ((label, steps[n]) for label, n in pairs)
    ]
    return Table(rows, title=f"ZeRO-3 vs ZeRO-2 on {cluster}, EMULATED")


# Section 1: claims that circulate (our words), what they say, the unit and why they are off;
# the notebook computes the calculator's value of each, in this order.
CLAIMS = (
    ("70B on 64 GPUs, no ZeRO", "280 GB", "GB", "4 B/param: fp32 weights only, not 16"),
    ("70B on 64 GPUs, ZeRO-3", "~4 GB", "GB", "the same 4 B/param, / 64"),
    ("10B under DDP", "80 GB", "GB", "no fp32 master (40 GB); m and v are 80 GB, not 40"),
    ("10B, FSDP on 4 GPUs", "20 GB", "GB", "a quarter of the wrong 80 GB"),
    ("ZeRO-1, K = 8", "8N + 8N/K = 9N", "B/param", "fp32 Adam's formula; mixed: 4N + 12N/K"),
    ("ZeRO-2, K = 8", "6N + 10N/K = 7.25N", "B/param", "matches no recipe; mixed: 2N + 14N/K"),
    ("ZeRO-1 cuts memory 4x (K = 8)", "4x", "x", "4x only as K -> infinity"),
    ("ZeRO-2 cuts memory 8x (K = 8)", "8x", "x", "8x only as K -> infinity"),
    ("70B on 8 GPUs with FSDP", "~9B params: fits", "GB", "8.75B params, 140 GB of state"),
)


def claims_table(values: list[float]) -> Table:
    """Section 1's table: each of ``CLAIMS`` beside the calculator's value for it."""
    if len(values) != len(CLAIMS):
        raise ValueError(f"values: one per claim ({len(CLAIMS)}), got {len(values)}")
    rows = [
        dict(claim=c, they_say=s, calculator=v, unit=u, why=w)
        for (c, s, u, w), v in zip(CLAIMS, values)
    ]
    title = "Source claims vs calc.model_state_memory"
    return Table(rows, title=title, fmt={"calculator": "{:,.2f}"})


def bytes_table(res: dict[str, Any], formula: dict[str, float]) -> Table:
    """Section 6's table: per variant, the ring formula's bytes, the ledger's, the wire's (rank
    0, one step), what gloo sends (its reduce-scatter is an all-reduce), and the ratios to DDP."""
    from lab_utils.measure import BYTE_UNITS, byte_row

    ddp = res["DDP"]
    rows = []
    for n, f in formula.items():
        r = res[n]
        gloo = r.ledger_total + r.ledger_bytes.get("reduce_scatter", 0)
        extra = dict(collectives=str(r.calls), gloo_sends=round(gloo))
        ratios = dict(
            ledger_vs_DDP=r.ledger_total / ddp.ledger_total, wire_vs_DDP=r.wire / ddp.wire
        )
        rows.append(byte_row(n, f, r.ledger_total, r.wire, **extra, **ratios))
    fmt = {k: "{:.3f}" for k in ("wire / formula", "ledger_vs_DDP", "wire_vs_DDP")}
    units = BYTE_UNITS | {"gloo_sends": "B"}
    return Table(rows, title="Bytes rank 0 sent in one step", units=units, fmt=fmt)


def held_table(
    timelines: dict[str, Any], state_calc: int, calc_gathered: dict[str, int], whole: int
) -> Table:
    """Section 7's memory table (rank 0): the fp32 state and the peak of full bf16 weights held,
    measured, beside the calculator's, per run ("no prefetch", "prefetch")."""
    rows = [
        dict(
            run=name,
            fp32_state=t.state_bytes,
            calc_state=int(state_calc),
            peak_gathered=t.peak_held,
            calc_gathered=int(calc_gathered[name]),
            peak_total=t.state_bytes + t.peak_held,
            whole_model_bf16=int(whole),
        )
        for name, t in timelines.items()
    ]
    return Table(rows, title="Memory per rank at the peak (bytes)")


def overlap_table(timelines: dict[str, Any]) -> Table:
    """Section 7's overlap table (rank 0): block all-gathers that started while the block before
    them computed, and the gather time left exposed (emulated ms), per run."""
    rows = [
        dict(
            run=name,
            **{f"overlapped_{k}": v for k, v in t.overlapped.items()},
            **{f"exposed_{k}_ms": 1e3 * v for k, v in t.exposed_gather_s.items()},
            peak_gathered=t.peak_held,
        )
        for name, t in timelines.items()
    ]
    fmt = {"exposed_forward_ms": "{:.1f}", "exposed_backward_ms": "{:.1f}"}
    return Table(rows, title="Rank 0: block all-gathers hidden behind compute (emulated)", fmt=fmt)


def steps_table(steps: dict[str, Any], title: str) -> Table:
    """Section 7b's table: each variant's emulated step, compute, comm, hidden comm and the
    time the compute stream waited, in ms."""
    rows = [
        dict(
            variant=n,
            step_ms=1e3 * p.step_s,
            compute_ms=1e3 * p.compute_s,
            comm_ms=1e3 * p.comm_s,
            hidden_ms=1e3 * p.hidden_s,
            waiting_ms=1e3 * (p.step_s - p.compute_s),
        )
        for n, p in steps.items()
    ]
    return Table(rows, title=title)


def variants_table(res: dict[str, Any], names: tuple[str, ...], title: str) -> Table:
    """Sections 8 and 9: losses, model state, collectives and ledger bytes of some variants."""
    rows = [
        dict(
            variant=n,
            losses=str([round(x, 6) for x in res[n].losses]),
            model_state=res[n].memory["total"],
            collectives=str(res[n].calls),
            ledger_bytes=res[n].ledger_total,
        )
        for n in names
    ]
    return Table(rows, title=title, fmt={"ledger_bytes": "{:,.0f}"})


def precision_table(runs: dict[str, Any]) -> Table:
    """Section 9's table: bytes one rank sends per step by collective (ledger), and the last
    loss, for fp32 and bf16 runs."""
    rows = [
        dict(
            variant=n,
            all_gather=r.ledger_bytes["all_gather"],
            reduce_scatter=r.ledger_bytes["reduce_scatter"],
            last_loss=r.losses[-1],
        )
        for n, r in runs.items()
    ]
    fmt = {"last_loss": "{:.6f}", "all_gather": "{:,.0f}", "reduce_scatter": "{:,.0f}"}
    return Table(rows, title="Bytes one rank sends per step (ledger)", fmt=fmt)
