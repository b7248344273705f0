"""A 3D-parallelism planner: enumerate DP x TP x PP layouts and rank them (labs 08, 12).

The estimates are first-order and deliberately simple (every term is a formula from the
other calculators), so a learner can check any number by hand:

* memory per GPU = model state (ZeRO over dp, params split by tp and pp, the embedding on the
  first stage) + activations of the first stage with 1F1B (p micro-batches in flight) +
  one layer's working set when recomputing + fp32 logits on the last stage;
* time per step = (compute + TP all-reduces + PP sends) * (1 + bubble) + DP gradient sync,
  with NO overlap of communication and compute (a pessimistic bound);
* compute = hardware FLOPs / (world * peak * efficiency).

Rank layout matches ``lab_utils.topology``: tp innermost (consecutive ranks, same node), then
dp, then pp ("TP inside a node, PP across nodes, DP everywhere").
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import (
    boolean,
    choice,
    instance,
    nonneg_int,
    pos_int,
    sequence,
)
from lab_utils.calc._check import (
    zero_stage as _zero_stage,
)
from lab_utils.calc._layout_cost import batch_terms, check_inputs, layout_plans, layout_terms
from lab_utils.calc._layout_rules import Verdict, check_search, divisors, ranked
from lab_utils.calc.activations import RECOMPUTE
from lab_utils.calc.hardware import Cluster
from lab_utils.calc.memory import ModelStateMemory
from lab_utils.calc.params import ModelConfig
from lab_utils.calc.units import fmt_bytes


@dataclass(frozen=True)
class Plan(Verdict):
    """One evaluated layout. Times in seconds per optimizer step, memory in bytes per GPU
    (the fullest pipeline stage). ``problems`` make it infeasible; ``warnings`` do not."""

    dp: int
    tp: int
    pp: int
    zero_stage: int
    micro_batch: int
    recompute: str
    n_micro: int
    model_state: ModelStateMemory
    activation_bytes: float
    memory_bytes: float
    gpu_mem_bytes: float
    compute_s: float
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    bubble: float
    step_s: float
    mfu: float
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def layout(self) -> tuple[int, int, int]:
        return (self.dp, self.tp, self.pp)

    def summary(self) -> str:
        return (
            f"DP={self.dp} TP={self.tp} PP={self.pp} ZeRO-{self.zero_stage} "
            f"mb={self.micro_batch} recompute={self.recompute}"
        )

    def details(self) -> list[str]:
        """Memory and time, term by term (``explain`` prints them)."""
        ms = self.model_state
        return [
            f"  memory/GPU {fmt_bytes(self.memory_bytes)} of {fmt_bytes(self.gpu_mem_bytes)}"
            f" = model state {fmt_bytes(ms.total)} (params {fmt_bytes(ms.params)}, grads "
            f"{fmt_bytes(ms.grads)}, optimizer+master {fmt_bytes(ms.optimizer + ms.master)})"
            f" + activations {fmt_bytes(self.activation_bytes)}",
            f"  step ~{self.step_s:.2f} s = (compute {self.compute_s:.2f} + TP "
            f"{self.tp_comm_s:.2f} + PP {self.pp_comm_s:.3f}) x (1 + bubble "
            f"{self.bubble:.1%}) + DP {self.dp_comm_s:.2f}; MFU ~{self.mfu:.0%}; "
            f"{self.n_micro} micro-batches per step",
        ]


def evaluate(
    cfg: ModelConfig,
    cluster: Cluster,
    global_batch: int,
    seq_len: int,
    dp: int,
    tp: int,
    pp: int,
    zero_stage: int = 1,
    micro_batch: int = 1,
    recompute: str = "selective",
    recipe: str = "mixed_adam",
    sequence_parallel: bool = True,
    allow_tp_across_nodes: bool = False,
    compute_efficiency: float = 0.5,
) -> Plan:
    """Estimate memory, time and feasibility of one layout (see module docstring).

    Sources: model state Rajbhandari et al. 2020 Sec. 5; activations Korthikanti et al. 2022
    Table 2 (SP applied when tp > 1 and ``sequence_parallel``); first stage holds p
    micro-batches under 1F1B and bubble (p-1)/m (Narayanan et al. 2021 Sec. 2.2); TP does
    4 all-reduces of b*s*h per layer per micro-batch (Shoeybi et al. 2019); PP sends b*s*h/t
    per micro-batch each way (Narayanan et al. 2021 Sec. 4.1, scatter/gather); DP moves
    2(n-1)/n (ZeRO-0/1/2) or 3(n-1)/n (ZeRO-3) of the 16-bit params per micro-batch group
    (ZeRO Sec. 7), and ZeRO-2/3 repeat their reduce-scatter (and ZeRO-3 its all-gathers)
    for every micro-batch because sharded gradients cannot be accumulated locally.
    TP must divide the query heads; with grouped-query attention a TP above the K/V heads
    replicates them (a warning) and one that neither divides nor is a multiple of them is a
    problem (``_layout_cost.kv_heads_messages``).
    Lab 08 (planner), lab 12 (grading a proposed config with ``check_config``).
    """
    check_inputs(
        cfg, cluster, global_batch, seq_len, recipe, allow_tp_across_nodes, compute_efficiency
    )
    for name, val in (("dp", dp), ("tp", tp), ("pp", pp), ("micro_batch", micro_batch)):
        pos_int(name, val)
    _zero_stage(zero_stage)
    choice("recompute", recompute, RECOMPUTE)
    terms = layout_terms(
        cfg,
        cluster,
        seq_len,
        tp,
        pp,
        dp,
        (micro_batch,),
        (recompute,),
        (zero_stage,),
        recipe,
        allow_tp_across_nodes,
        boolean("sequence_parallel", sequence_parallel),
    )
    batch = batch_terms(cfg, cluster, global_batch, seq_len, compute_efficiency)
    return _plan(layout_plans(terms, batch, cluster, global_batch, tp, pp, dp, True)[0])


def plan(
    cfg: ModelConfig,
    cluster: Cluster,
    global_batch: int,
    seq_len: int,
    micro_batches: tuple[int, ...] = (1, 2, 4, 8),
    recomputes: tuple[str, ...] = RECOMPUTE,
    zero_stages: tuple[int, ...] = (0, 1, 2, 3),
    recipe: str = "mixed_adam",
    allow_tp_across_nodes: bool = False,
    compute_efficiency: float = 0.5,
    top_k: int = 0,
) -> list[Plan]:
    """Enumerate (dp, tp, pp, zero_stage, micro_batch, recompute) with dp*tp*pp = world,
    tp | n_heads, pp | n_layers, dp*micro_batch | global_batch; evaluate each with
    ``evaluate``; return feasible plans fastest first, then infeasible ones (least memory
    first) with their reasons. ``top_k > 0`` keeps only that many. The work candidates share
    is done once (``_layout_cost``); the plans are exactly ``evaluate``'s. Lab 08.
    """
    check_inputs(
        cfg, cluster, global_batch, seq_len, recipe, allow_tp_across_nodes, compute_efficiency
    )
    nonneg_int("top_k", top_k)
    check_search("plan", cluster, micro_batches)
    sequence("recomputes", recomputes, lambda _, rc: choice("recompute", rc, RECOMPUTE), min_len=1)
    sequence("zero_stages", zero_stages, lambda _, z: _zero_stage(z), min_len=1)
    batch = batch_terms(cfg, cluster, global_batch, seq_len, compute_efficiency)
    world, out = cluster.world, []
    for tp in (t for t in divisors(world) if cfg.n_heads % t == 0):
        for pp in (p for p in divisors(world // tp) if cfg.n_layers % p == 0):
            dp = world // (tp * pp)
            zeros = tuple(z for z in zero_stages if dp > 1 or z == 0)
            terms = layout_terms(
                cfg,
                cluster,
                seq_len,
                tp,
                pp,
                dp,
                tuple(micro_batches),
                tuple(recomputes),
                zeros,
                recipe,
                bool(allow_tp_across_nodes),
                True,
            )
            out += map(_plan, layout_plans(terms, batch, cluster, global_batch, tp, pp, dp, False))
    return ranked(out, top_k, global_batch, world)


def _plan(fields: dict) -> Plan:
    """A Plan from its fields without the frozen dataclass's __init__ (20 object.__setattr__
    calls, most of ``plan``'s cost): the same fields in the same order."""
    p = object.__new__(Plan)
    object.__setattr__(p, "__dict__", fields)
    return p


def best_per_layout(plans: list[Plan]) -> list[Plan]:
    """Keep the fastest feasible plan of each (dp, tp, pp), in ranking order. Lab 08 tables."""
    sequence("plans", plans, lambda name, p: instance(name, p, Plan, "an item of calc.plan(...)"))
    seen, out = set(), []
    for pl in plans:
        if pl.feasible and pl.layout not in seen:
            seen.add(pl.layout)
            out.append(pl)
    return out


def check_config(
    cfg: ModelConfig,
    cluster: Cluster,
    global_batch: int,
    seq_len: int,
    dp: int,
    tp: int,
    pp: int,
    zero_stage: int = 1,
    micro_batch: int = 1,
    recompute: str = "selective",
    **kwargs: object,
) -> Plan:
    """Evaluate ONE proposed config and explain its problems (``.explain()``), e.g. to grade
    a learner's answer in lab 12. Same model as ``evaluate``; never raises for an infeasible
    layout, only for malformed inputs (negative sizes, unknown options)."""
    return evaluate(
        cfg,
        cluster,
        global_batch,
        seq_len,
        dp,
        tp,
        pp,
        zero_stage,
        micro_batch,
        recompute,
        **kwargs,
    )  # type: ignore[arg-type]
