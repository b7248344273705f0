"""Published training throughputs predicted with the emulator's cost model (validate, part b).

Full-size runs (hundreds to thousands of GPUs) are not run: each row is an ANALYTIC
EXTRAPOLATION with the ingredients the emulator charges (FLOPs at peak x the preset's ONE
efficiency, ``calc.comm`` collective times over the links each group spans, ``calc.pipeline``
bubbles), labelled as such in the table. Per GPU and iteration:

    T = (compute + exposed TP/CP communication) x (1 + bubble) + data-parallel gradient sync

Assumptions shared by every row (never tuned per row): micro-batch 1; TP and CP collectives
exposed (no overlap); the gradient sync exposed after the last backward; point-to-point time
neglected. Narayanan et al. 2021 trained with full recomputation and 1F1B (PipeDream-flush);
for Llama 3 the interleaving depth v is not printed: v = 2 is assumed. The efficiency is
``calc.hardware.CLUSTER_SPECS[...].compute_efficiency`` (an assumed 0.6, not fitted to these
rows).
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc.comm import group_collective_time, tp_layer_comm
from lab_utils.calc.flops import megatron_hardware_flops
from lab_utils.calc.layouts import LLAMA3_405B_TABLE4
from lab_utils.calc.params import NARAYANAN_TABLE1, PRESETS, param_count
from lab_utils.calc.pipeline import bubble
from lab_utils.calc.scaling import flops_per_token
from lab_utils.twin.topology import Cluster


@dataclass(frozen=True)
class Published:
    """A published figure and our prediction of it (TFLOP/s per GPU)."""

    name: str
    source: str
    published: float
    predicted: float
    how: str


def _coll(c: Cluster, op: str, size: int, per_node: int, nbytes: float) -> float:
    nodes = -(-size // per_node)
    return group_collective_time(
        op,
        size,
        nodes,
        min(per_node, size),
        nbytes,
        c.intra.latency_s,
        c.intra.bytes_per_s,
        c.inter.latency_s,
        c.inter.bytes_per_s,
    )


def _time(
    c: Cluster,
    flops_gpu: float,
    comm_per_mb_layer: float,
    layers: float,
    m: int,
    pp: int,
    v: int,
    dp_sync: float,
) -> float:
    work = flops_gpu / c.flops_per_s + comm_per_mb_layer * layers * m
    sched = "interleaved" if v > 1 else "1f1b"
    return work * (1 + bubble(sched, pp, m, v).of_ideal) + dp_sync


def narayanan(row_index: int) -> Published:
    """A row of Narayanan et al. 2021, Table 1 on DGX A100 nodes (fp16, full recompute)."""
    r = NARAYANAN_TABLE1[row_index]
    c = Cluster.preset("DGX A100", nodes=r.n_gpus // 8)
    dp = r.n_gpus // (r.tp * r.pp)
    m = r.batch // dp
    flops = megatron_hardware_flops(r.batch, 2048, r.n_layers, r.hidden, 51200, "full") / r.n_gpus
    tp = tp_layer_comm(1, 2048, r.hidden, r.tp, 2, recompute="full")
    per_layer = sum(n * _coll(c, op, r.tp, 8, tp.message_bytes) for op, n in tp.ops)
    params = r.params_b * 1e9 / (r.tp * r.pp)
    sync = _coll(c, "all_reduce", dp, max(1, 8 // (r.tp * r.pp)), 2 * params)
    t = _time(c, flops, per_layer if r.tp > 1 else 0.0, r.n_layers / r.pp, m, r.pp, 1, sync)
    return Published(
        f"Megatron {r.params_b:g}B, {r.n_gpus} A100 (t={r.tp}, p={r.pp})",
        "Narayanan et al. 2021, Table 1 (TFLOP/s per GPU)",
        r.tflops_per_gpu,
        flops / t / 1e12,
        "analytic extrapolation",
    )


def llama3(row_index: int) -> Published:
    """A row of Meta 2024 (Llama 3), Table 4 on DGX H100 nodes (bf16, sequence parallel)."""
    r = LLAMA3_405B_TABLE4[row_index]
    cfg = PRESETS["llama3.1-405b"]
    c = Cluster.preset("DGX H100", nodes=r.gpus // 8)
    n = param_count(cfg).total
    flops = flops_per_token(n, cfg.n_layers, r.seq_len, cfg.hidden) * r.tokens_per_batch / r.gpus
    s_local = r.seq_len // r.cp
    tp = tp_layer_comm(1, s_local, cfg.hidden, r.tp, 2, sequence_parallel=True)
    per_layer = sum(k * _coll(c, op, r.tp, 8, tp.message_bytes) for op, k in tp.ops)
    if r.cp > 1:  # all-gather K and V forward, reduce-scatter their gradients backward
        kv = 2 * r.seq_len * cfg.kv_heads * cfg.head_dim * 2 / r.tp
        per_layer += _coll(c, "all_gather", r.cp, 1, kv) + _coll(c, "reduce_scatter", r.cp, 1, kv)
    params = n / (r.tp * r.pp)
    sync = _coll(c, "reduce_scatter", r.dp, 1, 4 * params)  # fp32 grads, FSDP (ZeRO-2)
    t = _time(c, flops, per_layer, cfg.n_layers / r.pp, r.batch_per_dp, r.pp, 2, sync)
    return Published(
        f"Llama 3 405B, {r.gpus} H100 (TP{r.tp} CP{r.cp} PP{r.pp} DP{r.dp})",
        "Meta 2024, Llama 3 paper, Table 4 (TFLOP/s per GPU)",
        r.tflops_per_gpu,
        flops / t / 1e12,
        "analytic extrapolation",
    )


def published_rows() -> list[Published]:
    """The rows of the table: three Megatron runs (small, middle, largest) and Llama 3's three."""
    return [narayanan(i) for i in (3, 6, 9)] + [llama3(i) for i in range(3)]
