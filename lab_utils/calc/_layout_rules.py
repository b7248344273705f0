"""What the two planners share (``planner``: DP x TP x PP; ``moe_planner``: PP x DP with EP
inside DP): the inputs they check alike, the links a collective crosses, the problems and
warnings they word alike, the verdict a plan carries and how plans are ranked. Labs 08, 09, 12.
"""

from __future__ import annotations

from functools import lru_cache
from operator import attrgetter
from typing import Any, Sequence

from lab_utils.calc._check import pos_int, sequence
from lab_utils.calc.hardware import Cluster
from lab_utils.calc.units import fmt_bytes

MAX_WORLD = 2**20  # the planners enumerate the divisors of the world size: a million GPUs


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_search(planner: str, cluster: Cluster, micro_batches: object) -> None:
    """The enumeration's own inputs: micro-batch sizes to try, a world it can enumerate."""
    sequence(
        "micro_batches",
        micro_batches,
        lambda _, mb: pos_int("each micro batch size", mb),
        min_len=1,
    )
    if cluster.world > MAX_WORLD:
        raise ValueError(
            f"the cluster has {cluster.world} GPUs; {planner} enumerates layouts "
            f"for at most {MAX_WORLD}: use fewer nodes"
        )


def link(cluster: Cluster, inter: bool) -> tuple[float, float]:
    """(bandwidth, latency) of the inter-node network if ``inter``, else of NVLink."""
    if inter:
        return cluster.inter_node_bw, cluster.inter_node_latency_s
    return cluster.intra_node_bw, cluster.intra_node_latency_s


def batch_problem(global_batch: int, dp: int, micro_batch: int) -> tuple[str, ...]:
    if global_batch % (dp * micro_batch) == 0:
        return ()
    return (
        f"global batch {global_batch} is not divisible by dp*micro_batch = "
        f"{dp * micro_batch}; change the batch or the micro-batch size",
    )


def memory_messages(mem: float, gpu_mem: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(problems, warnings) of needing ``mem`` bytes on a GPU of ``gpu_mem``."""
    if mem > gpu_mem:
        return (f"needs {fmt_bytes(mem)}{_too_big(gpu_mem)}",), ()
    if mem > 0.9 * gpu_mem:
        return (), (
            f"uses {mem / gpu_mem:.0%} of GPU memory: little headroom for "
            "fragmentation and temporary buffers",
        )
    return (), ()


@lru_cache(maxsize=64)
def _too_big(gpu_mem: float) -> str:
    return f" > {fmt_bytes(gpu_mem)} per GPU"  # once per GPU size: plan() asks it ~1e3 times


def bubble_warning(pp: int, n_micro: int, bubble: float) -> tuple[str, ...]:
    if pp > 1 and n_micro < pp:
        return (
            f"only {n_micro} micro-batches for {pp} stages: the bubble is {bubble:.0%} of "
            "compute; use m >= 4p",
        )
    return ()


def ranked(plans: Sequence[Any], keep: int, global_batch: int, world: int) -> list:
    """Feasible plans fastest first, then infeasible ones least memory first; ``keep`` > 0
    keeps that many. No candidate at all means the batch fits no layout."""
    if not plans:
        raise ValueError(
            f"no layout divides the problem: the global batch {global_batch} "
            f"must be divisible by dp*micro_batch for some dp dividing {world}; "
            f"try a batch that is a multiple of {world}"
        )
    ok = sorted((p for p in plans if p.feasible), key=attrgetter("step_s"))
    bad = sorted((p for p in plans if not p.feasible), key=attrgetter("memory_bytes"))
    out = ok + bad
    return out[:keep] if keep else out


class Verdict:
    """What ``Plan`` and ``MoEPlan`` share: ``problems`` make a plan infeasible, ``warnings``
    do not; ``explain`` is the readable report (lab 12 grades a proposed config with it)."""

    problems: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def feasible(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        raise NotImplementedError

    def details(self) -> list[str]:
        raise NotImplementedError

    def explain(self) -> str:
        """The summary, OK or NOT FEASIBLE, the plan's figures, its problems and warnings."""
        lines = [f"{self.summary()}: {'OK' if self.feasible else 'NOT FEASIBLE'}", *self.details()]
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)
