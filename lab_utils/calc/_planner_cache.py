"""Fast path of ``planner.plan``: the same numbers as ``planner.evaluate``, computed once.

``plan`` evaluates every (dp, tp, pp, zero, micro-batch, recompute) candidate, ~1,400 of them
for a 70B model on 256 GPUs, and ``evaluate`` redoes all the work of its layout each time
(parameter counts, model state, activations per layer, collective times, input checks).
Here that work is split by what it depends on:

* ``_tables`` (cached across calls, keyed by model, cluster, sequence length and options):
  everything that does not depend on the global batch, per layout / ZeRO stage /
  micro-batch / recompute, computed WITH THE CALCULATORS ``evaluate`` uses;
* ``candidates`` (per call): the terms that depend on the global batch (micro-batch count,
  tokens: compute, bubble, comm counts, memory of the in-flight micro-batches, MFU).

Every float is computed with the same operations in the same order as ``evaluate``, so the
results are bit-identical (``tests/test_calc_planner.py`` compares them field by field).
``plan`` uses this only for ordinary inputs (see ``fast_path_ok``); anything unusual goes
through ``evaluate``, which raises the same errors as before.
"""
from __future__ import annotations

from functools import lru_cache
from math import ceil

from lab_utils.calc._check import pos_num
from lab_utils.calc._layout_rules import _stage_params, kv_heads_messages
from lab_utils.calc.activations import RECOMPUTE, _layer_bytes
from lab_utils.calc.comm import collective_time
from lab_utils.calc.hardware import Cluster
from lab_utils.calc.memory import RECIPES, Recipe, model_state_memory
from lab_utils.calc.params import ModelConfig, param_count
from lab_utils.calc.scaling import flops_per_token
from lab_utils.calc.units import fmt_bytes

_N_AR = {"none": 4, "selective": 4, "full": 6}  # tp_layer_comm(backward=True).ops[0][1]


def fast_path_ok(cfg: object, cluster: object, global_batch: object, seq_len: object,
                 micro_batches: object, recomputes: object, zero_stages: object,
                 recipe: object, compute_efficiency: object) -> bool:
    """True when every candidate would pass ``evaluate``'s checks and the options are plain
    values that can key the cache (exact types, so a cached entry never answers for an
    equal-but-different value such as 1.0 for 1)."""
    if type(cfg) is not ModelConfig or type(cluster) is not Cluster:
        return False
    if type(global_batch) is not int or type(seq_len) is not int:
        return False
    if not all(type(x) in (tuple, list) for x in (micro_batches, recomputes, zero_stages)):
        return False
    if not all(type(m) is int for m in micro_batches):  # type: ignore[attr-defined]
        return False
    if not all(type(r) is str and r in RECOMPUTE for r in recomputes):  # type: ignore
        return False
    if not all(type(z) is int and z in (0, 1, 2, 3) for z in zero_stages):  # type: ignore
        return False
    if not (isinstance(recipe, Recipe) or (type(recipe) is str and recipe in RECIPES)):
        return False
    try:
        pos_num("compute_efficiency", compute_efficiency)
    except ValueError:
        return False
    return True


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@lru_cache(maxsize=32)
def _tables(cfg: ModelConfig, cluster: Cluster, seq_len: int, micro_batches: tuple[int, ...],
            recomputes: tuple[str, ...], zero_stages: tuple[int, ...], recipe: str | Recipe,
            allow_tp_across_nodes: bool) -> tuple:
    """Per layout, in ``plan``'s enumeration order, the terms that do not depend on the
    global batch (see ``evaluate`` for the formulas and their sources)."""
    world, gpn = cluster.world, cluster.gpus_per_node
    h, s, a = cfg.hidden, seq_len, cfg.n_heads
    pc = param_count(cfg)
    intra = (cluster.intra_node_bw, cluster.intra_node_latency_s)
    inter = (cluster.inter_node_bw, cluster.inter_node_latency_s)
    pp_bw, pp_lat = inter if cluster.n_nodes > 1 else intra
    layouts = []
    for tp in divisors(world):
        if cfg.n_heads % tp:
            continue
        tp_inter = tp > gpn
        tp_msg: tuple[str, ...] = ()
        if tp_inter:
            tp_msg = (f"TP={tp} spans {ceil(tp / gpn)} nodes: TP all-reduces (every layer) "
                      "cross the slow inter-node link",)
        kv_problems, kv_warnings = kv_heads_messages(cfg, tp)  # same order as evaluate()
        problems0, warnings0 = ((kv_problems, kv_warnings + tp_msg) if allow_tp_across_nodes
                                else (kv_problems + tp_msg, kv_warnings))
        sp = tp > 1
        tp_bw, tp_lat = inter if tp_inter else intra
        per_mb = []
        for b in micro_batches:
            tp_ct = (collective_time("all_reduce", tp, b * s * h * 2, tp_lat, tp_bw)
                     if tp > 1 else 0.0)
            pp_unit = pp_lat + b * s * h * 2 / tp / pp_bw
            logits = 4 * s * b * cfg.vocab_size / tp
            rcs = []
            for rc in recomputes:
                per_layer = _layer_bytes(s, b, h, a, tp, sp, rc)
                work = _layer_bytes(s, b, h, a, tp, sp, "none") if rc != "none" else 0.0
                rcs.append((rc, per_layer, work))
            per_mb.append((b, logits, tp_ct, pp_unit, rcs))
        for pp in divisors(world // tp):
            if cfg.n_layers % pp:
                continue
            dp = world // (tp * pp)
            layers = ceil(cfg.n_layers / pp)
            n_gpu = _stage_params(cfg, tp, pp)
            zeros = []
            for zero in (z for z in zero_stages if dp > 1 or z == 0):
                ms = model_state_memory(n_gpu, recipe, zero, dp)
                gathered = 2 * 2 * pc.per_layer / tp if zero == 3 else 0.0
                zero_warn = (("ZeRO-2/3 with PP re-syncs gradients (and params) every "
                              "micro-batch; DeepSpeed's pipeline engine supports only ZeRO-1 "
                              "(use ZeRO-1 with PP)",) if pp > 1 and zero >= 2 else ())
                zeros.append((zero, ms, ms.total, ms.total + gathered, gathered, zero_warn))
            dp_bw, dp_lat = inter if tp * dp > gpn else intra
            ct_rs = ct_ag = 0.0
            if dp > 1:
                ct_rs = collective_time("reduce_scatter", dp, 2 * n_gpu, dp_lat, dp_bw)
                ct_ag = collective_time("all_gather", dp, 2 * n_gpu, dp_lat, dp_bw)
            mbs = []
            for b, logits, tp_ct, pp_unit, rcs in per_mb:
                # act = per_layer * layers * in_flight + work; the last stage (pp > 1) holds
                # per_layer * layers + work + logits: both products left to right as there
                rows = tuple((rc, per_layer * layers, work,
                              per_layer * layers + work + logits, layers * _N_AR[rc])
                             for rc, per_layer, work in rcs)
                mbs.append((b, dp * b, logits, tp_ct, pp_unit, rows))
            layouts.append((tp, pp, dp, problems0, warnings0, tuple(zeros), ct_rs, ct_ag,
                            tuple(mbs)))
    return tuple(layouts)


def candidates(cfg: ModelConfig, cluster: Cluster, global_batch: int, seq_len: int,
               micro_batches: tuple[int, ...], recomputes: tuple[str, ...],
               zero_stages: tuple[int, ...], recipe: str | Recipe, allow_tp_across_nodes: bool,
               compute_efficiency: float) -> list:
    """Every candidate ``plan`` enumerates, in its order, as ``evaluate`` would return it.
    Only call when ``fast_path_ok`` is true."""
    from lab_utils.calc.planner import Plan
    tables = _tables(cfg, cluster, seq_len, tuple(micro_batches), tuple(recomputes),
                     tuple(zero_stages), recipe, bool(allow_tp_across_nodes))
    world, peak, gpu_mem = cluster.world, cluster.peak_flops, cluster.gpu_mem_bytes
    h, s = cfg.hidden, seq_len
    n_params = param_count(cfg).total
    tokens = global_batch * seq_len
    model_flops = flops_per_token(n_params, cfg.n_layers, s, h) * tokens
    extra = {"none": 0.0, "selective": 4 * cfg.n_layers * s * h,
             "full": 2 * n_params + 4 * cfg.n_layers * s * h}
    denom = world * peak * compute_efficiency
    compute = {rc: (model_flops + extra[rc] * tokens) / denom for rc in set(recomputes)}
    mfu_num = flops_per_token(n_params) * tokens
    mem_warn_at = 0.9 * gpu_mem
    too_big = f" > {fmt_bytes(gpu_mem)} per GPU"
    new, set_dict = object.__new__, object.__setattr__
    out = []
    for tp, pp, dp, problems0, warnings0, zeros, ct_rs, ct_ag, mbs in tables:
        # terms of each micro-batch size that divides the batch, shared by all ZeRO stages
        active = []
        for b, dpb, logits, tp_ct, pp_unit, rows in mbs:
            if global_batch % dpb:
                continue
            n_micro = max(1, global_batch // dpb)
            in_flight = min(pp, n_micro)
            bubble = (pp - 1) / n_micro
            pp_s = n_micro * 2 * pp_unit if pp > 1 else 0.0
            warn_b: tuple[str, ...] = ()
            if pp > 1 and n_micro < pp:
                warn_b = (f"only {n_micro} micro-batches for {pp} stages: the bubble is "
                          f"{bubble:.0%} of compute; use m >= 4p",)
            terms = []
            for rc, pl_layers, work, last, n_ar_layers in rows:
                act = pl_layers * in_flight + work
                tp_s = n_micro * n_ar_layers * tp_ct if tp > 1 else 0.0
                c = compute[rc]
                terms.append((rc, act, max(act, last), c, tp_s,
                              (c + tp_s + pp_s) * (1 + bubble)))
            active.append((b, n_micro, logits, pp_s, bubble, warn_b, terms))
        for zero, ms, ms_total, ms_gathered, gathered, warn_z in zeros:
            for b, n_micro, logits, pp_s, bubble, warn_b, terms in active:
                dp_s = 0.0
                if dp > 1:
                    n_rs, n_ag = ((1, 1) if zero < 2 else (n_micro, 1) if zero == 2
                                  else (n_micro, 2 * n_micro))
                    dp_s = n_rs * ct_rs + n_ag * ct_ag
                for rc, act, act_or_last, c, tp_s, base in terms:
                    if pp == 1:
                        mem = ms_total + act + logits + gathered
                    else:
                        mem = ms_gathered + act_or_last
                    problems, warnings = problems0, warnings0
                    if mem > gpu_mem:
                        problems = problems + (f"needs {fmt_bytes(mem)}{too_big}",)
                    elif mem > mem_warn_at:
                        warnings = warnings + (
                            f"uses {mem / gpu_mem:.0%} of GPU memory: little headroom for "
                            "fragmentation and temporary buffers",)
                    if warn_b or warn_z:
                        warnings = warnings + warn_b + warn_z
                    step = base + dp_s
                    # Plan(...) without the frozen-dataclass __init__ (20 object.__setattr__
                    # calls, most of the cost here): the same fields in the same order.
                    p = new(Plan)
                    set_dict(p, "__dict__", {
                        "dp": dp, "tp": tp, "pp": pp, "zero_stage": zero, "micro_batch": b,
                        "recompute": rc, "n_micro": n_micro, "model_state": ms,
                        "activation_bytes": act, "memory_bytes": mem, "gpu_mem_bytes": gpu_mem,
                        "compute_s": c, "tp_comm_s": tp_s, "pp_comm_s": pp_s, "dp_comm_s": dp_s,
                        "bubble": bubble, "step_s": step,
                        "mfu": mfu_num / (step * world * peak),
                        "problems": problems, "warnings": warnings})
                    out.append(p)
    return out
