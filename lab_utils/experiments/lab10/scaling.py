"""Lab 10's experiments: scaling curves and the four bottleneck families, measured.

    RunStats, ScalingResults, CurveFit   the records of a scaling run (twin.py runs it, on this
                                      machine's clock or the emulated cluster's: one model of time)
    bottleneck_worker(ctx, ...)       2 ranks: a compute-bound vs a communication-bound step
                                      (Timeline + CommLedger); a pipeline bubble on this
                                      machine's wall clock (twin.py times it on the emulated one)
    bottleneck_row(...)               one model's row of the section 6.1 table

(The in-process experiments, matmul rates and the slow data loader, are in local.py.)

Timing rules, because the labs run on shared laptops: every time is the BEST of several steps
(the one least disturbed by other programs); in-process benchmarks use this thread's CPU time.
One rank = one device = one core: the ranks run one intra-op thread each (``threads=1``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.distributed as dist

from lab_utils.data import shard_for_rank, token_batches
from lab_utils.experiments.common import sgd_step
from lab_utils.experiments.lab10.local import SCALING_CONFIG
from lab_utils.measure import CommLedger, Timeline
from lab_utils.models import TinyGPT, ToyMLP, count_params, lm_loss


def _flat_grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


@dataclass(frozen=True)
class StepLog:
    """One run's logged step times: the input of the fit_serial_fraction exercise."""

    n: int  # ranks (devices) of this run
    step_s: tuple[float, ...]  # every logged step, in order; step 0 is the warm-up


@dataclass(frozen=True)
class RunStats:
    """Rank 0's view of one data-parallel run (one mode, one N)."""

    n: int
    rows: int  # sequences per rank per step
    tokens: int  # tokens per step, all ranks
    step_s: float  # the BEST timed step (wall clock)
    cpu_s: float  # the least CPU time rank 0 got in a step
    comm_s: float  # communication not hidden behind compute, in the best step
    log_s: tuple[float, ...]  # every step's wall time as logged, warm-up (step 0) first
    losses: tuple[float, ...] = ()  # the global batch's mean loss per step (real mode)


@dataclass(frozen=True)
class ScalingResults:
    """Every run of twin.scaling_steps (this module's sibling): runs[mode][N]; mode in strong,
    weak. The same worker runs on this machine's wall clock and on the emulated cluster's."""

    runs: dict[str, dict[int, RunStats]]

    def get(self, mode: str, n: int) -> RunStats:
        return self.runs[mode][n]

    def step_logs(self, mode: str) -> list[StepLog]:
        """Each N's logged step times (warm-up first): the input of the fit_serial_fraction
        exercise."""
        return [StepLog(n, r.log_s) for n, r in sorted(self.runs[mode].items())]

    def wall_rows(self, cores: int) -> list[dict[str, Any]]:
        """Every run as one row of lab 10's section 2 table (this machine's wall clock): the
        best step, the CPU time rank 0 got, the communication not hidden, tokens per second;
        a note where the N ranks outnumber the ``cores``."""
        return [
            {
                "run": mode,
                "N": n,
                "rows/rank": r.rows,
                "tokens/step": r.tokens,
                "step ms": 1e3 * r.step_s,
                "CPU ms/rank": 1e3 * r.cpu_s,
                "comm ms": 1e3 * r.comm_s,
                "tokens/s": r.tokens / r.step_s,
                "note": "more ranks than cores" if n > cores else "",
            }
            for mode, runs in self.runs.items()
            for n, r in runs.items()
        ]


@dataclass(frozen=True)
class CurveFit:
    """An Amdahl fit of one strong-scaling curve, or the reason there is none."""

    label: str
    ns: tuple[int, ...]
    times: tuple[float, ...]
    fit: Any = None  # calc.SerialFit, or None
    why: str = ""  # why there is no fit (e.g. the times do not fall with N)

    @property
    def speedups(self) -> tuple[float, ...]:
        return tuple(self.times[0] / t for t in self.times)

    def row(self) -> dict[str, Any]:
        """This curve as one row of lab 10's section 4 table: its speedups, the fitted s, R^2
        and the ceiling 1/s (None without a fit), and why there is no fit."""
        fit = self.fit
        return {
            "curve": self.label,
            **{f"speedup N={n}": sp for n, sp in zip(self.ns, self.speedups)},
            "fitted s": fit.serial_fraction if fit else None,
            "R^2": fit.r2 if fit else None,
            "ceiling 1/s": fit.speedup_limit if fit else None,
            "no fit because": self.why,
        }


def bottleneck_row(name: str, stats: "CommStats", split: "CommSplit", flop_per_byte: float) -> dict:
    """One row of lab 10's section 6.1 table: a model's parameters, the bytes its all-reduce
    sent (ledger), its FLOPs per byte sent, its compute and all-reduce times (``comm_split``)."""
    return {
        "model": name,
        "P": stats.params,
        "ledger: MB sent per rank": stats.bytes_sent / 1e6,
        "FLOP per byte sent": flop_per_byte,
        "compute ms": 1e3 * split.compute_s,
        "all-reduce ms": 1e3 * split.comm_s,
        "communication share": split.comm_fraction,
    }


def _comm_vs_compute(
    ctx: Any, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Any, steps: int
) -> "CommStats":
    """Forward+backward, then ONE all-reduce of the flat gradient (naive DDP: nothing
    overlaps), each step in Timeline spans. The CommLedger watches the untimed warm-up step:
    its first use loads torch's dispatch machinery (~1-2 s), which must stay out of timings."""
    tl, ledger = Timeline(ctx), CommLedger()
    spans = []
    for i in range(steps + 1):  # step 0: warm-up
        tl.events.clear()
        dist.barrier()
        with tl.span("compute"):
            loss_fn(model(x), y).backward()
        flat = _flat_grads(model)
        with ledger if i == 0 else contextlib.nullcontext(), tl.span("all_reduce"):
            dist.all_reduce(flat)
        sgd_step(model)
        if i > 0:
            spans.append({e["name"]: e["end"] - e["start"] for e in tl.events})
    return CommStats(
        params=count_params(model),
        grad_bytes=flat.numel() * flat.element_size(),
        rows=int(x.shape[0]),
        spans=spans,
        bytes_sent=ledger.bytes_sent("all_reduce"),
        calls=ledger.count("all_reduce"),
        events=list(tl.events),
    )


@dataclass(frozen=True)
class CommStats:
    """One rank's naive-DDP steps: compute span, then ONE all-reduce of the flat gradient."""

    params: int
    grad_bytes: int
    rows: int
    spans: list[dict]  # per timed step: {"compute": s, "all_reduce": s}
    bytes_sent: int  # ledger: the ring formula applied to the observed tensor
    calls: int
    events: list[dict]  # the last step's Timeline events (for a Gantt chart)


@dataclass(frozen=True)
class CommSplit:
    compute_s: float
    comm_s: float
    comm_fraction: float


def comm_split(per_rank: Sequence[CommStats]) -> CommSplit:
    """Combine the ranks' spans of ``_comm_vs_compute``. Per step, compute = the slowest
    rank's compute and transfer = the SHORTEST all-reduce span (the last rank to arrive waits
    for nobody: its span is the transfer itself; the others' spans add waiting for it). Each
    is the best over the steps; comm_fraction = transfer / (compute + transfer)."""
    steps = range(len(per_rank[0].spans))
    compute = min(max(r.spans[k]["compute"] for r in per_rank) for k in steps)
    transfer = min(min(r.spans[k]["all_reduce"] for r in per_rank) for k in steps)
    return CommSplit(compute, transfer, transfer / (compute + transfer))


@dataclass(frozen=True)
class Bottlenecks:
    compute_bound: CommStats
    comm_bound: CommStats
    pipeline: dict[int, list[dict]] = field(default_factory=dict)  # m -> this rank's events


def bottleneck_worker(ctx: Any, steps: int = 6, bubble_ms: Sequence[int] = (2, 8)) -> Bottlenecks:
    """Two ranks. (1) Compute-bound: TinyGPT, 16 sequences per rank. Communication-bound: a
    wide ToyMLP (6.3M parameters, 25 MB of fp32 gradients) on 2 rows per rank. (2) A 2-stage
    1F1B pipeline (lab 07's ``pipeline_step``, real compute, after a warm-up step) for each m in
    ``bubble_ms``: its per-rank timeline on this machine's wall clock. Every rank returns its
    own results."""
    from lab_utils.experiments.lab07 import pipeline_step

    cfg = SCALING_CONFIG
    x, y = shard_for_rank(
        token_batches(1, 32, cfg.seq_len, cfg.vocab_size, seed=1)[0], ctx.rank, ctx.world_size
    )
    mlp = ToyMLP(d_in=512, d_hidden=2048, d_out=512, n_layers=3, seed=0)
    g = torch.Generator().manual_seed(ctx.rank)
    xm, ym = torch.randn(2, 512, generator=g), torch.randn(2, 512, generator=g)
    return Bottlenecks(
        compute_bound=_comm_vs_compute(ctx, TinyGPT(cfg, seed=0), x, y, lm_loss, steps),
        comm_bound=_comm_vs_compute(ctx, mlp, xm, ym, torch.nn.functional.mse_loss, steps),
        pipeline={m: pipeline_step(ctx, "1f1b", m=m, warmup_step=True).events for m in bubble_ms},
    )
