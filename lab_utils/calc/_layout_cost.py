"""The cost model of a DP x TP x PP layout: memory per GPU, time per step, problems, warnings
(the formulas and their sources are in ``planner``'s docstrings). ONE implementation, for
``planner.evaluate`` (one candidate) and ``planner.plan`` (every candidate).

Its work is split by what it depends on, so that ``plan`` does each piece once:

* ``layout_terms`` (cached): everything of one (tp, pp, dp) layout that does not depend on
  the global batch: parameters, model state per ZeRO stage, activations per micro-batch size
  and recomputation, collective times, the layout's problems and warnings;
* ``batch_terms``: what depends on the global batch but not the layout (compute, MFU's FLOPs);
* ``layout_plans``: both combined into each candidate's fields.
Labs 08, 12.
"""

from __future__ import annotations

from functools import lru_cache
from math import ceil

from lab_utils.calc._check import boolean, instance, number, pos_int
from lab_utils.calc._layout_rules import batch_problem, bubble_warning, link, memory_messages
from lab_utils.calc.activations import _layer_bytes
from lab_utils.calc.comm import collective_time
from lab_utils.calc.hardware import Cluster
from lab_utils.calc.memory import Recipe, model_state_memory, resolve_recipe
from lab_utils.calc.params import ModelConfig, param_count
from lab_utils.calc.scaling import flops_per_token

_N_AR = {"none": 4, "selective": 4, "full": 6}  # tp_layer_comm(backward=True).ops[0][1]
# Collectives per step over the dp group (reduce-scatters, all-gathers) of the 16-bit params
# of a GPU, as a function of the micro-batch count m. ZeRO-0/1 accumulate gradients locally
# and reduce once; sharded gradients (ZeRO-2/3) are reduce-scattered after EVERY micro-batch,
# and ZeRO-3 re-gathers the params for each micro-batch's forward and backward.
_DP_OPS = {0: lambda m: (1, 1), 1: lambda m: (1, 1), 2: lambda m: (m, 1), 3: lambda m: (m, 2 * m)}


def check_inputs(
    cfg: object,
    cluster: object,
    global_batch: object,
    seq_len: object,
    recipe: object,
    allow_tp_across_nodes: object,
    compute_efficiency: object,
) -> None:
    """The inputs ``evaluate`` and ``plan`` share."""
    instance("cfg", cfg, ModelConfig, "calc.preset('llama2-70b')")
    instance("cluster", cluster, Cluster, "calc.dgx_h100(32)")
    pos_int("global_batch", global_batch)
    pos_int("seq_len", seq_len)
    resolve_recipe(recipe)  # type: ignore[arg-type]
    boolean("allow_tp_across_nodes", allow_tp_across_nodes)
    number(
        "compute_efficiency",
        compute_efficiency,
        0,
        1,
        lo_open=True,
        expected="a fraction in (0, 1] of the peak FLOP/s",
        hint="0.5 means half the peak; more than 1 would beat the hardware",
    )


def kv_heads_messages(cfg: ModelConfig, tp: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(problems, warnings) of splitting grouped-query attention's K/V heads over ``tp``.

    Each TP rank computes whole query heads and needs the K/V heads they share. tp | n_kv:
    fine. tp a multiple of n_kv: every K/V head must be REPLICATED on tp/n_kv ranks (extra
    memory and compute; Megatron-LM refuses it, it requires n_kv_heads % tp == 0): a warning.
    Neither: no even split exists, a problem. Llama-2-70B has 8 K/V heads, so TP=16 replicates.
    """
    kv = cfg.kv_heads
    if kv % tp == 0:
        return (), ()
    if tp % kv == 0:
        return (), (
            f"TP={tp} exceeds the {kv} key/value heads of grouped-query attention: each "
            f"K/V head is replicated on {tp // kv} ranks (Megatron-LM requires "
            "n_kv_heads % tp == 0); activations and K/V weights are larger than shown",
        )
    return (
        f"TP={tp} does not divide the {kv} key/value heads (grouped-query attention) and "
        f"is not a multiple of them: the K/V heads cannot be split evenly; use a TP that "
        f"divides {kv}",
    ), ()


def stage_params(cfg: ModelConfig, tp: int, pp: int) -> float:
    """Parameters on one GPU of the fullest stage: L/p layers (TP-split) plus the embedding
    on the first stage or the head on the last one (vocab-parallel, split by tp)."""
    pc = param_count(cfg)
    layers = ceil(cfg.n_layers / pp) * pc.per_layer
    if pp == 1:
        return (layers + pc.embedding + pc.head) / tp
    # A tied head on a different stage than the embedding needs its own copy (Megatron).
    head = cfg.vocab_size * cfg.hidden if cfg.tied_embeddings else pc.head
    return (layers + max(pc.embedding, head)) / tp


def _layout_messages(
    cfg: ModelConfig, cluster: Cluster, tp: int, pp: int, dp: int, allow_tp_across_nodes: bool
) -> tuple:
    """(problems before the batch's, problems after it, warnings) of the layout itself."""
    before: tuple[str, ...] = ()
    kv_warnings: tuple[str, ...] = ()
    if dp * tp * pp != cluster.world:
        before += (
            f"dp*tp*pp = {dp}*{tp}*{pp} = {dp * tp * pp} but the cluster has "
            f"{cluster.world} GPUs; the three degrees must multiply to the world size",
        )
    if cfg.n_heads % tp:
        before += (
            f"TP={tp} does not divide n_heads={cfg.n_heads}: each TP rank must own "
            "whole attention heads",
        )
    else:
        kv_problems, kv_warnings = kv_heads_messages(cfg, tp)
        before += kv_problems
    if cfg.n_layers % pp:
        before += (
            f"PP={pp} does not divide n_layers={cfg.n_layers}: stages would get "
            "unequal layer counts",
        )
    gpn = cluster.gpus_per_node
    spans: tuple[str, ...] = ()
    if tp > gpn:
        spans = (
            f"TP={tp} spans {ceil(tp / gpn)} nodes: TP all-reduces (every layer) cross "
            "the slow inter-node link",
        )
    if allow_tp_across_nodes:
        return before, (), kv_warnings + spans
    return before, spans, kv_warnings


@lru_cache(maxsize=1024)
def layout_terms(
    cfg: ModelConfig,
    cluster: Cluster,
    seq_len: int,
    tp: int,
    pp: int,
    dp: int,
    micro_batches: tuple[int, ...],
    recomputes: tuple[str, ...],
    zero_stages: tuple[int, ...],
    recipe: str | Recipe,
    allow_tp_across_nodes: bool,
    sequence_parallel: bool,
) -> tuple:
    """The batch-independent terms of one layout (see the module docstring)."""
    h, s, a = cfg.hidden, seq_len, cfg.n_heads
    messages = _layout_messages(cfg, cluster, tp, pp, dp, allow_tp_across_nodes)
    sp = sequence_parallel and tp > 1
    tp_bw, tp_lat = link(cluster, tp > cluster.gpus_per_node)
    pp_bw, pp_lat = link(cluster, cluster.n_nodes > 1)  # a stage boundary crosses nodes
    dp_bw, dp_lat = link(cluster, tp * dp > cluster.gpus_per_node)
    layers = ceil(cfg.n_layers / pp)
    n_gpu = stage_params(cfg, tp, pp)
    zeros = []
    for zero in zero_stages:
        ms = model_state_memory(n_gpu, recipe, zero, dp)
        gathered = 2 * 2 * param_count(cfg).per_layer / tp if zero == 3 else 0.0  # FSDP
        warn = (
            (
                "ZeRO-2/3 with PP re-syncs gradients (and params) every micro-batch; "
                "DeepSpeed's pipeline engine supports only ZeRO-1 (use ZeRO-1 with PP)",
            )
            if pp > 1 and zero >= 2
            else ()
        )
        zeros.append((zero, ms, ms.total, ms.total + gathered, gathered, warn))
    ct_rs = ct_ag = 0.0
    if dp > 1:
        ct_rs = collective_time("reduce_scatter", dp, 2 * n_gpu, dp_lat, dp_bw)
        ct_ag = collective_time("all_gather", dp, 2 * n_gpu, dp_lat, dp_bw)
    mbs = []
    for b in micro_batches:
        tp_ct = collective_time("all_reduce", tp, b * s * h * 2, tp_lat, tp_bw) if tp > 1 else 0.0
        pp_unit = pp_lat + b * s * h * 2 / tp / pp_bw
        logits = 4 * s * b * cfg.vocab_size / tp  # fp32 logits of the last stage
        rows = []
        for rc in recomputes:
            per_layer = _layer_bytes(s, b, h, a, tp, sp, rc)
            # recomputing a layer re-materialises its full activations for a moment
            work = _layer_bytes(s, b, h, a, tp, sp, "none") if rc != "none" else 0.0
            # the first stage holds min(p, m) micro-batches (1F1B); the last one holds one
            # micro-batch and the logits: both products left to right, as layout_plans uses
            rows.append(
                (
                    rc,
                    per_layer * layers,
                    work,
                    per_layer * layers + work + logits,
                    layers * _N_AR[rc],
                )
            )
        mbs.append((b, dp * b, logits, tp_ct, pp_unit, tuple(rows)))
    return messages, tuple(zeros), ct_rs, ct_ag, tuple(mbs)


def batch_terms(
    cfg: ModelConfig, cluster: Cluster, global_batch: int, seq_len: int, compute_efficiency: float
) -> tuple[dict[str, float], float]:
    """({recompute: compute seconds}, model FLOPs of MFU's numerator) of one global batch."""
    h, s = cfg.hidden, seq_len
    n_params = param_count(cfg).total
    tokens = global_batch * seq_len
    model_flops = flops_per_token(n_params, cfg.n_layers, s, h) * tokens
    extra = {
        "none": 0.0,
        "selective": 4 * cfg.n_layers * s * h,  # attention core forward
        "full": 2 * n_params + 4 * cfg.n_layers * s * h,
    }  # a whole forward
    denom = cluster.world * cluster.peak_flops * compute_efficiency
    compute = {rc: (model_flops + x * tokens) / denom for rc, x in extra.items()}
    return compute, flops_per_token(n_params) * tokens


def layout_plans(
    terms: tuple,
    batch: tuple,
    cluster: Cluster,
    global_batch: int,
    tp: int,
    pp: int,
    dp: int,
    every_batch: bool,
) -> list[dict]:
    """The fields of each candidate of one layout, in ``plan``'s order (ZeRO stage, micro-
    batch, recompute). ``every_batch``: keep micro-batch sizes that do not divide the batch
    (``evaluate``: reported as a problem); ``plan`` skips them."""
    (before, after, warnings0), zeros, ct_rs, ct_ag, mbs = terms
    compute, mfu_num = batch
    world, peak, gpu_mem = cluster.world, cluster.peak_flops, cluster.gpu_mem_bytes
    active = []
    for b, dpb, logits, tp_ct, pp_unit, rows in mbs:
        if global_batch % dpb and not every_batch:
            continue
        n_micro = max(1, global_batch // dpb)
        bubble = (pp - 1) / n_micro
        problems0 = before + batch_problem(global_batch, dp, b) + after
        active.append(
            (
                b,
                n_micro,
                min(pp, n_micro),
                logits,
                tp_ct,
                bubble,
                n_micro * 2 * pp_unit if pp > 1 else 0.0,
                problems0,
                bubble_warning(pp, n_micro, bubble),
                rows,
            )
        )
    out = []
    for zero, ms, ms_total, ms_gathered, gathered, warn_z in zeros:
        for b, n_micro, in_flight, logits, tp_ct, bubble, pp_s, problems0, warn_b, rows in active:
            n_rs, n_ag = _DP_OPS[zero](n_micro)
            dp_s = n_rs * ct_rs + n_ag * ct_ag if dp > 1 else 0.0
            for rc, pl_layers, work, last, n_ar_layers in rows:
                act = pl_layers * in_flight + work
                mem = (
                    ms_total + act + logits + gathered if pp == 1 else ms_gathered + max(act, last)
                )
                tp_s = n_micro * n_ar_layers * tp_ct if tp > 1 else 0.0
                c = compute[rc]
                step = (c + tp_s + pp_s) * (1 + bubble) + dp_s
                mem_problems, mem_warnings = memory_messages(mem, gpu_mem)
                out.append(
                    {
                        "dp": dp,
                        "tp": tp,
                        "pp": pp,
                        "zero_stage": zero,
                        "micro_batch": b,
                        "recompute": rc,
                        "n_micro": n_micro,
                        "model_state": ms,
                        "activation_bytes": act,
                        "memory_bytes": mem,
                        "gpu_mem_bytes": gpu_mem,
                        "compute_s": c,
                        "tp_comm_s": tp_s,
                        "pp_comm_s": pp_s,
                        "dp_comm_s": dp_s,
                        "bubble": bubble,
                        "step_s": step,
                        "mfu": mfu_num / (step * world * peak),
                        "problems": problems0 + mem_problems,
                        "warnings": warnings0 + mem_warnings + warn_b + warn_z,
                    }
                )
    return out
