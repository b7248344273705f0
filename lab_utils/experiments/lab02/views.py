"""Lab 02's figures and table rows: the plumbing that turns its measurements into views.

FLOAT_FMT                        column formats of the float-format tables (format_rows)
run_rows(runs)                   one row per 16-bit training run: losses, zero grads, skips
loss_figure(runs)                loss per step of each training run (log scale)
scale_figure(log)                the dynamic loss scale and the skipped steps
checkpoint_rows(sweep, n)        one row per checkpoint segment size k (checkpoint_sweep)
segments_figure(seg, sweep, plan)  measured peak vs calc.checkpoint_segments over segments s
lr_figure(runs)                  training loss vs samples seen of each batch-size run
sharpness_rows(sweep)            one row per (seed, batch) of the batch-noise sweep
"""

from __future__ import annotations

import math
import statistics

import plotly.graph_objects as go

from lab_utils.viz.style import titled

FLOAT_FMT = (
    {c: "{:.6g}" for c in ("max (formula)", "max (torch)")}
    | {"binades": "{:.0f}"}
    | {c: "{:.4g}" for c in ("min normal", "min subnormal", "eps (relative step)")}
)


def run_rows(runs: dict[str, dict]) -> list[dict]:
    """Lab 02: first and last loss, share of zero gradients, skipped steps, NaN, per run."""
    return [
        {
            "run": name,
            "first loss": log["loss"][0],
            "last loss": log["loss"][-1],
            "zero grads": statistics.mean(log["zero_grads"]),
            "skipped steps": len(log["skipped"]),
            "NaN?": any(map(math.isnan, log["loss"])),
        }
        for name, log in runs.items()
    ]


def loss_figure(runs: dict[str, dict]) -> go.Figure:
    """Lab 02: the loss per step of each run (``train``'s logs), one line each."""
    lines = [go.Scatter(y=log["loss"], name=name, mode="lines") for name, log in runs.items()]
    fig = go.Figure(lines)
    title = "Same model, same data: loss per step"
    return titled(fig, title, "step", "loss (fp32 evaluation)", 800, 380, yaxis_type="log")


def scale_figure(log: dict) -> go.Figure:
    """Lab 02: log2 of the dynamic loss scale per step, the skipped (overflow) steps marked."""
    fig = go.Figure(
        go.Scatter(y=[math.log2(s) for s in log["scale"]], mode="lines", name="log2(scale)")
    )
    fig.add_trace(
        go.Scatter(
            x=log["skipped"],
            y=[math.log2(log["scale"][i]) for i in log["skipped"]],
            mode="markers",
            name="skipped step (overflow)",
            marker=dict(color="red"),
        )
    )
    return titled(fig, "Dynamic loss scale", "step", "log2(loss scale)", 800, 330)


def checkpoint_rows(sweep: dict, n_blocks: int) -> list[dict]:
    """Lab 02: one row per blocks-per-segment k of ``memory.checkpoint_sweep`` (k = 0: none)."""
    base_t = sweep[0].time_s
    return [
        {
            "blocks per segment k": k or "none",
            "segments": n_blocks // k if k else "-",
            "after fwd (MB)": r.after_forward / 1e6,
            "peak (MB)": r.peak / 1e6,
            "block forwards": r.block_forwards,
            "fwd+bwd (ms)": r.time_s * 1e3,
            "vs none": r.time_s / base_t,
        }
        for k, r in sweep.items()
    ]


def segments_figure(seg: dict[int, int], sweep: dict, plan: dict) -> go.Figure:
    """Lab 02: measured peak per segment count s (seg: s -> k) next to the calculator's plan."""
    fig = go.Figure(
        go.Scatter(
            x=list(seg),
            y=[sweep[k].peak / 1e6 for k in seg.values()],
            mode="lines+markers",
            name="measured peak",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=list(seg),
            y=[p.memory / 1e6 for p in plan.values()],
            mode="lines",
            line_dash="dot",
            name="s a + ceil(n/s) A (calc.checkpoint_segments)",
        )
    )
    fig.add_hline(y=sweep[0].peak / 1e6, line_dash="dash", annotation_text="no checkpointing")
    title = "Peak saved activations vs number of segments s"
    return titled(fig, title, "segments s = L / k", "MB", 750, 380, xaxis_type="log")


def lr_figure(runs: dict[str, tuple]) -> go.Figure:
    """Lab 02: training loss vs samples seen, one line per (samples, losses) run."""
    fig = go.Figure(
        [go.Scatter(x=s, y=l, name=name, mode="lines") for name, (s, l) in runs.items()]
    )
    title = "Same samples, different batch sizes"
    return titled(fig, title, "samples seen", "training loss", 850, 400)


def sharpness_rows(sweep: list) -> list[dict]:
    """Lab 02: one row per run of ``measure.sharpness.batch_noise_sweep``."""
    keys = ("seed", "batch", "noise", "steps", "train_loss", "sharpness", "test_acc")
    names = ("seed", "batch", "noise lr/B", "steps", "train loss", "sharpness", "test acc")
    return [{n: getattr(r, k) for n, k in zip(names, keys)} for r in sweep]
