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
from math import ceil
from operator import attrgetter

from lab_utils.calc import _planner_cache
from lab_utils.calc._check import (boolean, choice, instance, int_choice, nonneg_int, pos_int,
                                   sequence)
from lab_utils.calc._layout_rules import (MAX_WORLD, _check_inputs, _stage_params,
                                          kv_heads_messages)
from lab_utils.calc.activations import RECOMPUTE, _layer_bytes
from lab_utils.calc.comm import collective_time, tp_layer_comm
from lab_utils.calc.hardware import Cluster
from lab_utils.calc.memory import ModelStateMemory, model_state_memory
from lab_utils.calc.params import ModelConfig, param_count
from lab_utils.calc.scaling import flops_per_token
from lab_utils.calc.units import fmt_bytes


@dataclass(frozen=True)
class Plan:
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
    def feasible(self) -> bool:
        return not self.problems

    @property
    def layout(self) -> tuple[int, int, int]:
        return (self.dp, self.tp, self.pp)

    def summary(self) -> str:
        return (f"DP={self.dp} TP={self.tp} PP={self.pp} ZeRO-{self.zero_stage} "
                f"mb={self.micro_batch} recompute={self.recompute}")

    def explain(self) -> str:
        """A readable report, used by the interview lab to grade a proposed config."""
        ms = self.model_state
        lines = [f"{self.summary()}: {'OK' if self.feasible else 'NOT FEASIBLE'}",
                 f"  memory/GPU {fmt_bytes(self.memory_bytes)} of {fmt_bytes(self.gpu_mem_bytes)}"
                 f" = model state {fmt_bytes(ms.total)} (params {fmt_bytes(ms.params)}, grads "
                 f"{fmt_bytes(ms.grads)}, optimizer+master {fmt_bytes(ms.optimizer + ms.master)})"
                 f" + activations {fmt_bytes(self.activation_bytes)}",
                 f"  step ~{self.step_s:.2f} s = (compute {self.compute_s:.2f} + TP "
                 f"{self.tp_comm_s:.2f} + PP {self.pp_comm_s:.3f}) x (1 + bubble "
                 f"{self.bubble:.1%}) + DP {self.dp_comm_s:.2f}; MFU ~{self.mfu:.0%}; "
                 f"{self.n_micro} micro-batches per step"]
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def evaluate(cfg: ModelConfig, cluster: Cluster, global_batch: int, seq_len: int, dp: int,
             tp: int, pp: int, zero_stage: int = 1, micro_batch: int = 1,
             recompute: str = "selective", recipe: str = "mixed_adam",
             sequence_parallel: bool = True, allow_tp_across_nodes: bool = False,
             compute_efficiency: float = 0.5) -> Plan:
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
    problem (``_layout_rules.kv_heads_messages``).
    Lab 08 (planner), lab 12 (grading a proposed config with ``check_config``).
    """
    _check_inputs(cfg, cluster, global_batch, seq_len, recipe, allow_tp_across_nodes,
                  compute_efficiency)
    for name, val in (("dp", dp), ("tp", tp), ("pp", pp), ("micro_batch", micro_batch)):
        pos_int(name, val)
    int_choice("zero_stage", zero_stage, (0, 1, 2, 3), "0 = plain DDP")
    choice("recompute", recompute, RECOMPUTE)
    boolean("sequence_parallel", sequence_parallel)
    problems, warnings = [], []
    world, gpn = cluster.world, cluster.gpus_per_node
    if dp * tp * pp != world:
        problems.append(f"dp*tp*pp = {dp}*{tp}*{pp} = {dp * tp * pp} but the cluster has "
                        f"{world} GPUs; the three degrees must multiply to the world size")
    if cfg.n_heads % tp:
        problems.append(f"TP={tp} does not divide n_heads={cfg.n_heads}: each TP rank must own "
                        "whole attention heads")
    else:
        kv_problems, kv_warnings = kv_heads_messages(cfg, tp)
        problems += kv_problems
        warnings += kv_warnings
    if cfg.n_layers % pp:
        problems.append(f"PP={pp} does not divide n_layers={cfg.n_layers}: stages would get "
                        "unequal layer counts")
    if global_batch % (dp * micro_batch):
        problems.append(f"global batch {global_batch} is not divisible by dp*micro_batch = "
                        f"{dp * micro_batch}; change the batch or the micro-batch size")
    tp_inter = tp > gpn
    if tp_inter:
        msg = (f"TP={tp} spans {ceil(tp / gpn)} nodes: TP all-reduces (every layer) cross the "
               "slow inter-node link")
        (warnings if allow_tp_across_nodes else problems).append(msg)
    n_micro = max(1, global_batch // (dp * micro_batch))
    sp = sequence_parallel and tp > 1
    h, s, b = cfg.hidden, seq_len, micro_batch

    # --- memory (the first stage holds the most activations; the embedding lives there too)
    n_gpu = _stage_params(cfg, tp, pp)
    ms = model_state_memory(n_gpu, recipe, zero_stage, dp)
    layers = ceil(cfg.n_layers / pp)
    per_layer = _layer_bytes(s, b, h, cfg.n_heads, tp, sp, recompute)
    # recomputing a layer re-materialises its full activations for a moment
    work = _layer_bytes(s, b, h, cfg.n_heads, tp, sp, "none") if recompute != "none" else 0.0
    act = per_layer * layers * min(pp, n_micro) + work  # first stage: p in flight (1F1B)
    logits = 4 * s * b * cfg.vocab_size / tp  # fp32 logits of the last stage
    gathered = 2 * 2 * param_count(cfg).per_layer / tp if zero_stage == 3 else 0.0  # FSDP
    if pp == 1:
        mem = ms.total + act + logits + gathered
    else:  # the last stage holds 1 micro-batch in flight but the logits
        mem = ms.total + gathered + max(act, per_layer * layers + work + logits)
    if mem > cluster.gpu_mem_bytes:
        problems.append(f"needs {fmt_bytes(mem)} > {fmt_bytes(cluster.gpu_mem_bytes)} per GPU")
    elif mem > 0.9 * cluster.gpu_mem_bytes:
        warnings.append(f"uses {mem / cluster.gpu_mem_bytes:.0%} of GPU memory: little headroom "
                        "for fragmentation and temporary buffers")

    # --- time
    n_params = param_count(cfg).total
    tokens = global_batch * seq_len
    model_flops = flops_per_token(n_params, cfg.n_layers, s, h) * tokens
    extra = {"none": 0.0, "selective": 4 * cfg.n_layers * s * h,  # attention core forward
             "full": 2 * n_params + 4 * cfg.n_layers * s * h}[recompute]  # a whole forward
    compute = (model_flops + extra * tokens) / (world * cluster.peak_flops * compute_efficiency)
    tp_bw, tp_lat = ((cluster.inter_node_bw, cluster.inter_node_latency_s) if tp_inter
                     else (cluster.intra_node_bw, cluster.intra_node_latency_s))
    tp_s = 0.0
    if tp > 1:
        tc = tp_layer_comm(b, s, h, tp, 2, sp, True, recompute)
        n_ar = tc.ops[0][1]  # with SP each all-reduce is an all-gather + reduce-scatter pair
        tp_s = n_micro * layers * n_ar * collective_time("all_reduce", tp, tc.message_bytes,
                                                         tp_lat, tp_bw)
    pp_inter = cluster.n_nodes > 1  # some stage boundary crosses nodes and sets the pace
    pp_bw, pp_lat = ((cluster.inter_node_bw, cluster.inter_node_latency_s) if pp_inter
                     else (cluster.intra_node_bw, cluster.intra_node_latency_s))
    pp_s = n_micro * 2 * (pp_lat + b * s * h * 2 / tp / pp_bw) if pp > 1 else 0.0
    dp_inter = tp * dp > gpn
    dp_bw, dp_lat = ((cluster.inter_node_bw, cluster.inter_node_latency_s) if dp_inter
                     else (cluster.intra_node_bw, cluster.intra_node_latency_s))
    # Collectives per step over the dp group, each of the 16-bit params of this GPU. With
    # ZeRO-0/1 gradients accumulate locally over the m micro-batches and are reduced once;
    # sharded gradients (ZeRO-2/3) must be reduce-scattered after EVERY micro-batch, and
    # ZeRO-3 re-gathers the params for each micro-batch's forward and backward.
    n_rs, n_ag = {0: (1, 1), 1: (1, 1), 2: (n_micro, 1), 3: (n_micro, 2 * n_micro)}[zero_stage]
    p_bytes = 2 * n_gpu
    dp_s = 0.0
    if dp > 1:
        dp_s = (n_rs * collective_time("reduce_scatter", dp, p_bytes, dp_lat, dp_bw)
                + n_ag * collective_time("all_gather", dp, p_bytes, dp_lat, dp_bw))
    bubble = (pp - 1) / n_micro
    step = (compute + tp_s + pp_s) * (1 + bubble) + dp_s
    if pp > 1 and n_micro < pp:
        warnings.append(f"only {n_micro} micro-batches for {pp} stages: the bubble is "
                        f"{bubble:.0%} of compute; use m >= 4p")
    if pp > 1 and zero_stage >= 2:
        warnings.append("ZeRO-2/3 with PP re-syncs gradients (and params) every micro-batch; "
                        "DeepSpeed's pipeline engine supports only ZeRO-1 (use ZeRO-1 with PP)")
    mfu = flops_per_token(n_params) * tokens / (step * world * cluster.peak_flops)
    return Plan(dp, tp, pp, zero_stage, micro_batch, recompute, n_micro, ms, act, mem,
                cluster.gpu_mem_bytes, compute, tp_s, pp_s, dp_s, bubble, step, mfu,
                tuple(problems), tuple(warnings))


def plan(cfg: ModelConfig, cluster: Cluster, global_batch: int, seq_len: int,
         micro_batches: tuple[int, ...] = (1, 2, 4, 8),
         recomputes: tuple[str, ...] = RECOMPUTE, zero_stages: tuple[int, ...] = (0, 1, 2, 3),
         recipe: str = "mixed_adam", allow_tp_across_nodes: bool = False,
         compute_efficiency: float = 0.5, top_k: int = 0) -> list[Plan]:
    """Enumerate (dp, tp, pp, zero_stage, micro_batch, recompute) with dp*tp*pp = world,
    tp | n_heads, pp | n_layers, dp*micro_batch | global_batch; evaluate each with
    ``evaluate``; return feasible plans fastest first, then infeasible ones (least memory
    first) with their reasons. ``top_k > 0`` keeps only that many. The work candidates share
    is done once (``_planner_cache``); the plans are exactly ``evaluate``'s. Lab 08.
    """
    _check_inputs(cfg, cluster, global_batch, seq_len, recipe, allow_tp_across_nodes,
                  compute_efficiency)
    nonneg_int("top_k", top_k)
    sequence("micro_batches", micro_batches, lambda _, mb: pos_int("each micro batch size", mb),
             min_len=1)
    sequence("recomputes", recomputes, lambda _, rc: choice("recompute", rc, RECOMPUTE),
             min_len=1)
    sequence("zero_stages", zero_stages,
             lambda _, z: int_choice("zero_stage", z, (0, 1, 2, 3), "0 = plain DDP"), min_len=1)
    if cluster.world > MAX_WORLD:
        raise ValueError(f"the cluster has {cluster.world} GPUs; plan enumerates layouts for at "
                         f"most {MAX_WORLD}: use fewer nodes")
    if _planner_cache.fast_path_ok(cfg, cluster, global_batch, seq_len, micro_batches,
                                   recomputes, zero_stages, recipe, compute_efficiency):
        out = _planner_cache.candidates(cfg, cluster, global_batch, seq_len, micro_batches,
                                        recomputes, zero_stages, recipe, allow_tp_across_nodes,
                                        compute_efficiency)  # same Plans, work shared
    else:
        out = _evaluate_all(cfg, cluster, global_batch, seq_len, micro_batches, recomputes,
                            zero_stages, recipe, allow_tp_across_nodes, compute_efficiency)
    if not out:
        raise ValueError(f"no layout divides the problem: the global batch {global_batch} "
                         f"must be divisible by dp*micro_batch for some dp dividing "
                         f"{cluster.world}; try a batch that is a multiple of {cluster.world}")
    # = sort by (not feasible, step if feasible else memory): both sorts are stable
    ok = [pl for pl in out if pl.feasible]
    ok.sort(key=attrgetter("step_s"))
    bad = [pl for pl in out if not pl.feasible]
    bad.sort(key=attrgetter("memory_bytes"))
    out = ok + bad
    return out[:top_k] if top_k else out


def _evaluate_all(cfg: ModelConfig, cluster: Cluster, global_batch: int, seq_len: int,
                  micro_batches: tuple[int, ...], recomputes: tuple[str, ...],
                  zero_stages: tuple[int, ...], recipe: str, allow_tp_across_nodes: bool,
                  compute_efficiency: float) -> list[Plan]:
    """``plan``'s candidates, unsorted, one ``evaluate`` each (the reference the fast path in
    ``_planner_cache`` must match; also used for unusual inputs)."""
    out = []
    for tp in _planner_cache.divisors(cluster.world):
        if cfg.n_heads % tp:
            continue
        for pp in _planner_cache.divisors(cluster.world // tp):
            if cfg.n_layers % pp:
                continue
            dp = cluster.world // (tp * pp)
            for zero in (z for z in zero_stages if dp > 1 or z == 0):
                for mb in (m for m in micro_batches if global_batch % (dp * m) == 0):
                    for rc in recomputes:
                        out.append(evaluate(cfg, cluster, global_batch, seq_len, dp, tp, pp,
                                            zero, mb, rc, recipe, True, allow_tp_across_nodes,
                                            compute_efficiency))
    return out


def best_per_layout(plans: list[Plan]) -> list[Plan]:
    """Keep the fastest feasible plan of each (dp, tp, pp), in ranking order. Lab 08 tables."""
    sequence("plans", plans, lambda name, p: instance(name, p, Plan, "an item of calc.plan(...)"))
    seen, out = set(), []
    for pl in plans:
        if pl.feasible and pl.layout not in seen:
            seen.add(pl.layout)
            out.append(pl)
    return out


def check_config(cfg: ModelConfig, cluster: Cluster, global_batch: int, seq_len: int,
                 dp: int, tp: int, pp: int, zero_stage: int = 1, micro_batch: int = 1,
                 recompute: str = "selective", **kwargs: object) -> Plan:
    """Evaluate ONE proposed config and explain its problems (``.explain()``), e.g. to grade
    a learner's answer in lab 12. Same model as ``evaluate``; never raises for an infeasible
    layout, only for malformed inputs (negative sizes, unknown options)."""
    return evaluate(cfg, cluster, global_batch, seq_len, dp, tp, pp, zero_stage, micro_batch,
                    recompute, **kwargs)  # type: ignore[arg-type]

