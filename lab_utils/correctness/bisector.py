"""The differential bisector: where does a distributed step first part from the reference? (lab 14)

    report = bisect(case)              # a Case (case.py): its step on ranks + its reference
    print(report)                      # verdict, the first diverging op, ranks, error, counts

What it does, for each case:
  1. runs the case's reference: one process, the global batch, float64, every submodule's
     output, the loss, every parameter's gradient and any named value recorded in execution
     order (forward, then backward in the order gradients were produced);
  2. runs the case's step on ``world_size`` real gloo ranks (one launch for all the cases of
     one world size), recording the same names with their layouts, and counting every
     collective per process group (measure.CommLedger);
  3. reassembles each tensor through its layout (layout.py: DP replicas, ZeRO / FSDP flat
     shards, TP column / row shards, PP stages, CP chunks, EP experts) and compares it with
     the reference under a bound derived from the dtype and the reduction size (compare.py);
  4. names the FIRST op beyond the bound, with the ranks and the error and what kind of wrong
     it is (a factor of exactly N: a SUM where the reference is a mean; replicas that disagree:
     a missing reduction), and any collective count that differs from what the case promised.

A reference that is itself non-finite is reported as "reference failed", not as a bug: there is
nothing to compare against. A configuration whose pieces cannot be reassembled raises
LayoutError naming the tensor and the layout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import overload

import torch

from lab_utils.correctness.case import Case, RankEnv
from lab_utils.correctness.compare import Divergence, compare
from lab_utils.correctness.layout import Layout, LayoutError, reassemble, split_reference
from lab_utils.correctness.recorder import Recorder
from lab_utils.measure.comm import CommLedger
from lab_utils.runtime.launch import run

RankPieces = dict[str, tuple[torch.Tensor, Layout | None]]
Counts = dict[tuple[str, tuple[int, ...]], int]  # (op, group ranks) -> calls on this rank
REDUCTIONS = ("all_reduce", "reduce_scatter", "reduce")


@dataclass
class BisectReport:
    case: str
    verdict: str  # "clean", "diverged", "collectives differ", "reference failed"
    op: str | None  # the first op that is wrong (None when clean)
    divergence: Divergence | None
    collective_flags: list[str] = field(default_factory=list)
    collectives: dict[str, dict[str, int]] = field(default_factory=dict)  # group -> op -> n
    n_ops: int = 0  # tensors compared
    worst_ratio: float = 0.0  # largest error / bound among the ops before the first wrong one

    def __str__(self) -> str:
        where = " before it" if self.divergence else ""
        lines = [
            f"{self.case}: {self.verdict}"
            + (f" at {self.op}" if self.op else "")
            + f" ({self.n_ops} tensors compared; worst error/bound{where} "
            f"{self.worst_ratio:.2g})"
        ]
        if self.divergence:
            lines.append(f"  {self.divergence}")
        lines += [f"  collectives: {flag}" for flag in self.collective_flags]
        for group, ops in self.collectives.items():
            lines.append(f"  group {group}: " + ", ".join(f"{o} x{n}" for o, n in ops.items()))
        return "\n".join(lines)


def rank_steps(ctx, cases: Sequence[Case]) -> list[tuple[RankPieces, Counts]]:
    """On a rank: run each case's step, recording its tensors and counting its collectives."""
    env, out = RankEnv(ctx), []
    for case in cases:
        torch.manual_seed(case.seed)
        rec = Recorder()
        with CommLedger() as ledger:
            case.step(env, rec)
        rec.close()
        out.append((rec.pieces(), dict(Counter((r.op, r.group_ranks) for r in ledger.records))))
    return out


def reference_events(case: Case) -> Recorder:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seed)
        rec = Recorder(reference=True)
        case.reference(rec)
        rec.close()
    return rec


def _collectives(case: Case, per_rank: list[Counts]) -> tuple[dict, list[str]]:
    """Calls per group and op (as its first member counted them), and the promises broken.
    (Members that disagree on a collective's count do not get here: gloo would hang first.)"""
    counts: dict[tuple[int, ...], dict[str, int]] = {}
    for (op, ranks), n in sorted({k: v for c in per_rank for k, v in c.items()}.items()):
        counts.setdefault(ranks, {})[op] = per_rank[ranks[0]].get((op, ranks), n)
    flags = []
    for op, ranks, want in case.expect:
        got = counts.get(tuple(ranks), {}).get(op, 0)
        if got != want:
            kind = "extra" if got > want else "missing"
            flags.append(
                f"{op} on group {tuple(ranks)}: {got} calls per rank, the configuration "
                f"promises {want} ({kind} {abs(got - want)})"
            )
    return {str(r): ops for r, ops in counts.items()}, flags


def _gather(key: str, per_rank: list[RankPieces]) -> tuple[Layout, dict[int, torch.Tensor]]:
    held = {r: p[key] for r, p in enumerate(per_rank) if key in p}
    if not held:
        raise LayoutError(f"tensor {key!r}: the reference recorded it but no rank did")
    layouts = {r: lay for r, (_, lay) in held.items()}
    first = min(layouts)
    if layouts[first] is None:
        raise LayoutError(f"tensor {key!r}: rank {first} recorded it without a layout")
    other = [r for r, lay in layouts.items() if lay != layouts[first]]
    if other:
        raise LayoutError(
            f"tensor {key!r}: rank {first} declares layout {layouts[first]}, "
            f"rank {other[0]} declares {layouts[other[0]]}"
        )
    return layouts[first], {r: t for r, (t, _) in held.items()}


def _narrow(
    key: str, layout: Layout, held: dict[int, torch.Tensor], ref: torch.Tensor, div: Divergence
) -> tuple[int, ...]:
    """The ranks whose OWN piece is wrong: a shard of a wrong tensor may be right."""
    expected = split_reference(key, layout, held, ref)
    if expected is None:  # a Partial: the terms of a sum cannot be judged one by one
        return div.ranks
    wrong = tuple(
        r for r in div.ranks if not float((held[r].double() - expected[r]).abs().max()) <= div.bound
    )
    return wrong or div.ranks


def _groups_of_size(factor: float | None, per_rank: list[Counts]) -> str:
    """The groups that reduced and whose size is the whole factor: the likely culprits."""
    if factor is None:
        return ""
    k = round(max(factor, 1 / factor)) if factor else 0
    groups = sorted(
        {
            ranks
            for counts in per_rank
            for (op, ranks) in counts
            if op in REDUCTIONS and len(ranks) == k
        }
    )
    return f"; groups of {k} ranks that reduced: {groups}" if groups else ""


def judge(case: Case, ref: Recorder, per_rank: list[tuple[RankPieces, Counts]]) -> BisectReport:
    """Compare one case's rank records with its reference; the first wrong op wins."""
    table, flags = _collectives(case, [c for _, c in per_rank])
    pieces = [p for p, _ in per_rank]
    for key, event in ref.events.items():
        if not torch.isfinite(event.tensor).all():
            return BisectReport(case.name, "reference failed", key, None, flags, table, 0)
    worst, n = 0.0, 0
    for key, event in ref.events.items():
        layout, held = _gather(key, pieces)
        replicas = reassemble(key, layout, held, event.tensor.shape)
        dtype = next(iter(held.values())).dtype
        div, ratio = compare(key, event.tensor, replicas, dtype, case.reduction_size)
        n += 1
        if div is not None:
            div.ranks = _narrow(key, layout, held, event.tensor, div)
            div.diagnosis += _groups_of_size(div.factor, [c for _, c in per_rank])
            return BisectReport(case.name, "diverged", key, div, flags, table, n, worst)
        worst = max(worst, ratio)
    verdict = "collectives differ" if flags else "clean"
    op = flags[0].split(":")[0] if flags else None
    return BisectReport(case.name, verdict, op, None, flags, table, n, worst)


@overload
def bisect(cases: Case, timeout_s: float = ..., quiet: bool = ...) -> BisectReport: ...
@overload
def bisect(
    cases: Sequence[Case], timeout_s: float = ..., quiet: bool = ...
) -> list[BisectReport]: ...


def bisect(cases, timeout_s: float = 120.0, quiet: bool = True):
    """Bisect one Case (-> a BisectReport) or several (-> a list, one launch per world size).
    ``timeout_s``: the launch's deadline; the ranks' process-group timeout is 3/4 of it, so a
    step that hangs in a collective raises with its stack instead of waiting 30 minutes."""
    batch = [cases] if isinstance(cases, Case) else list(cases)
    if not batch or not all(isinstance(c, Case) for c in batch):
        raise TypeError("bisect takes a Case or a sequence of Cases (lab_utils.correctness.Case)")
    reports: dict[int, BisectReport] = {}
    for size in sorted({c.world_size for c in batch}):
        idx = [i for i, c in enumerate(batch) if c.world_size == size]
        results = run(rank_steps, size, [batch[i] for i in idx], timeout_s=timeout_s, quiet=quiet)
        for j, i in enumerate(idx):
            per_rank = [results[r][j] for r in range(size)]
            reports[i] = judge(batch[i], reference_events(batch[i]), per_rank)
    ordered = [reports[i] for i in range(len(batch))]
    return ordered[0] if isinstance(cases, Case) else ordered
