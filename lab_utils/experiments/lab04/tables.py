"""Lab 04's results as table rows and figures (for lab_utils.viz.show_table and plotly): the
plumbing that turns what the ranks returned into what the notebook shows, so that its cells keep
the runs, the formulas and the checks.

    max_grad_diff             the largest |gradient - reference gradient| over ranks and names
    sampler_row, bound_row    DistributedSampler's shards; a run's differences beside the bounds
    comm_rows                 bytes one rank sent in a step: formula, ledger, wire, headers
    time_rows, sweep_rows     step times (medians) per implementation and per bucket cap
    sweep_figure, twin_rows, twin_figure   the bucket sweep: this machine, the emulated cluster
    hook_rows, loss_figure    torch DDP's communication hooks: bytes and loss curves
    lowcomm_rows, lowcomm_figure   local SGD and DiLoCo against every-step all-reduce
    fit_rows, allreduce_rows  does one DDP rank hold the model; a ring all-reduce at scale
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Mapping, Sequence

import plotly.graph_objects as go
import torch

from lab_utils.calc import (
    GB,
    collective_time,
    dp_bytes_per_rank,
    fmt_bytes,
    model_state_memory,
    ring_bytes_per_rank,
)
from lab_utils.measure import byte_row


def max_grad_diff(grads: Sequence[Mapping[str, torch.Tensor]], ref: Mapping[str, Any]) -> float:
    """Lab 04: max |g - reference p.grad| over every rank's gradients ``grads`` (name -> tensor)
    and every reference parameter ``ref`` (name -> parameter with its .grad)."""
    return max((g[n] - p.grad).abs().max().item() for g in grads for n, p in ref.items())


def sampler_row(drop_last: bool, e0: list, e1: list, dataset: Sequence) -> dict:
    """Lab 04: one DistributedSampler setting: its shards in epochs 0 and 1, the samples it
    repeats (padding to equal shards) or drops, and the shard size."""
    flat = [i for shard in e0 for i in shard]
    return {
        "sampler drop_last": drop_last,
        "epoch 0": e0,
        "epoch 1": e1,
        "repeated": len(flat) - len(set(flat)),
        "dropped": len(set(dataset) - set(flat)),
        "per rank": len(e0[0]),
    }


def bound_row(
    key: tuple, grad_diff: float, grad_bound: float, loss_diff: float, loss_bound: float, steps: int
) -> dict:
    """Lab 04 (4a): an (impl, dtype) run's differences from one process beside their bounds."""
    return {
        "impl": key[0],
        "dtype": key[1],
        "max |grad diff|": grad_diff,
        "grad bound": grad_bound,
        f"max |loss diff|, {steps} steps": loss_diff,
        "loss bound": loss_bound,
    }


def comm_rows(comm: Mapping[str, Any], formula: float) -> list[dict]:
    """Lab 04 (4b): bytes one rank sent per implementation; the wire's excess over the formula
    as 48-byte message headers per all-reduce."""
    return [
        byte_row(
            impl,
            formula,
            c.comm_bytes,
            c.wire_bytes,
            **{
                "all-reduces": c.comm_count,
                "headers per all-reduce": (c.wire_bytes - formula) / 48 / c.comm_count
                if c.wire_bytes
                else None,
            },
        )
        for impl, c in comm.items()
    ]


def med(ts: Sequence[float]) -> float:
    """Lab 04: the median of some durations in seconds, in ms."""
    return 1e3 * statistics.median(ts)


def time_rows(runs: Mapping[str, Any]) -> list[dict]:
    """Lab 04 (4d): median wall and CPU time per step of each implementation, vs torch DDP."""
    torch_run = runs["torch"]
    return [
        {
            "impl": i,
            "wall ms/step (rank 0)": med(r.step_s),
            "vs torch": med(r.step_s) / med(torch_run.step_s),
            "CPU ms/step": med(r.cpu_s),
            "CPU vs torch": med(r.cpu_s) / med(torch_run.cpu_s),
        }
        for i, r in runs.items()
    ]


def sweep_rows(sweep: Sequence[Any]) -> list[dict]:
    """Lab 04 (4d): BucketDDP's median step time per bucket cap."""
    return [
        {
            "bucket cap": f"{s.cap_bytes // 1024:,} KiB",
            "buckets": s.buckets,
            "ms/step": med(s.step_s),
        }
        for s in sweep
    ]


def sweep_figure(sweep: Sequence[Any]) -> go.Figure:
    """Lab 04 (4d): BucketDDP's median step time against the bucket cap, this machine."""
    fig = go.Figure(
        go.Scatter(
            x=[s.cap_bytes for s in sweep],
            y=[med(s.step_s) for s in sweep],
            text=[f"{s.buckets} buckets" for s in sweep],
            mode="lines+markers+text",
            textposition="top center",
        )
    )
    return fig.update_layout(
        title="BucketDDP step time vs bucket size (wall clock, this machine)",
        xaxis_type="log",
        xaxis_title="bucket cap (bytes)",
        yaxis_title="ms per step",
        height=320,
    )


def twin_rows(points: Sequence[Any], cap_name: Callable[[int], str]) -> list[dict]:
    """Lab 04 (4d, emulated): one row per sweep point, times in ms."""
    return [
        {
            "impl": p.impl,
            "bucket cap": cap_name(p.cap_bytes),
            "all-reduces": p.all_reduces,
            "emulated ms/step": 1e3 * p.step_s,
            "compute ms": 1e3 * p.compute_s,
            "comm ms": 1e3 * p.comm_s,
            "comm hidden under compute ms": 1e3 * p.hidden_s,
        }
        for p in points
    ]


def twin_figure(points: Sequence[Any], impls: Sequence[str], cluster: str) -> go.Figure:
    """Lab 04 (4d, emulated): step time against the bucket cap, one line per implementation."""
    lines = [
        go.Scatter(
            x=[p.cap_bytes for p in points if p.impl == impl],
            y=[1e3 * p.step_s for p in points if p.impl == impl],
            name=impl,
            mode="lines+markers",
        )
        for impl in impls
    ]
    return go.Figure(lines).update_layout(
        title=f"Step time vs bucket size on {cluster} (emulated)",
        xaxis_type="log",
        xaxis_title="bucket cap (bytes)",
        yaxis_title="emulated ms per step",
        height=320,
    )


def hook_rows(hooks: Mapping[str, Any], floats: Mapping[str, int], world: int) -> list[dict]:
    """Lab 04 (6): bytes per hook by formula (a ring all-reduce of ``floats[h]`` 4-byte units)
    and on the wire, and the final loss vs no hook. No ledger column: the hooks' all-reduces
    run inside torch's C++ reducer."""
    rows = [
        byte_row(
            h,
            ring_bytes_per_rank("all_reduce", world, 4 * floats[h]),
            wire=r.wire_bytes,
            **{"final loss": r.losses[-1], "vs none": r.losses[-1] - hooks["none"].losses[-1]},
        )
        for h, r in hooks.items()
    ]
    for row in rows:
        del row["ledger"]
    return rows


def loss_figure(runs: Mapping[str, Any], title: str) -> go.Figure:
    """Lab 04 (6): the loss of each run per step."""
    fig = go.Figure([go.Scatter(y=r.losses, name=h, mode="lines") for h, r in runs.items()])
    return fig.update_layout(
        title=title, xaxis_title="step", yaxis_title="global-batch loss", height=320
    )


def lowcomm_rows(low: Mapping[str, Any]) -> list[dict]:
    """Lab 04 (8b): bytes each method sent (ledger) vs every-step all-reduce, and its final
    held-out loss."""
    base = low["all-reduce every step"].bytes_sent
    return [
        {
            "method": k,
            "bytes per rank (ledger)": fmt_bytes(v.bytes_sent, "KB"),
            "x every-step": v.bytes_sent / base,
            "held-out loss at the end": v.held_out[-1],
        }
        for k, v in low.items()
    ]


def lowcomm_figure(low: Mapping[str, Any], every: int) -> go.Figure:
    """Lab 04 (8b): held-out loss after each synchronisation (every ``every`` steps)."""
    lines = [
        go.Scatter(x=[every * (j + 1) for j in range(len(v.held_out))], y=v.held_out, name=k)
        for k, v in low.items()
    ]
    return go.Figure(lines).update_layout(
        height=320, xaxis_title="step", yaxis_title="held-out loss", title="loss after each sync"
    )


def fit_rows(device: Any, sizes: Sequence[float]) -> list[dict]:
    """Lab 04 (9): the mixed-precision Adam model state (16 B/param, lab_utils.calc) of each model
    size and whether one ``device`` holds it."""
    fits = f"fits a {device.memory_bytes / GB:.0f} GB {device.name}?"
    rows = []
    for n in sizes:
        state = model_state_memory(n, "mixed_adam").total
        rows.append(
            {
                "model": f"{n / 1e9:.1f}B",
                "model state (16 B/param)": fmt_bytes(state),
                fits: state <= device.memory_bytes,
            }
        )
    return rows


def allreduce_rows(grad_bytes: float, link: Any, alpha: float, ns: Sequence[int]) -> list[dict]:
    """Lab 04 (9): a ring all-reduce of ``grad_bytes`` over ``link`` (alpha-beta, lab_utils.calc)
    at each world size in ``ns``: bytes per rank, time, the latency part, global batch at 8."""
    bw = link.bytes_per_s
    return [
        {
            "N": n,
            "bytes/rank": fmt_bytes(dp_bytes_per_rank(grad_bytes, n)),
            "time (ms)": 1e3 * collective_time("all_reduce", n, grad_bytes, alpha, bw),
            "of which latency (ms)": 1e3 * collective_time("all_reduce", n, 0, alpha, bw),
            "global batch (8/GPU)": 8 * n,
        }
        for n in ns
    ]
