"""Lab 08 on the emulated cluster (``lab_utils.twin``): HSDP vs FSDP across two nodes, and a few
dp x tp x pp layouts ranked by their emulated step beside the planner's ranking.

    shard_steps(ctx, mode, steps)   FSDP2 over every rank ("fsdp") or HSDP ("hsdp": shard inside a
                                    node, replicate across nodes), each step marked
    layout_steps(ctx, dp, tp, pp)   the lab's from-scratch 3D step (train_3d) at one global batch
    planner_step(dp, tp, pp, c)     calc's planner on the same model, batch and cluster (no overlap)
    layout_rows(runs, cluster)      both rankings side by side, as table rows

The tiny model does the math; the clock charges every layer as a 4096-wide one of 2048-token
sequences, two per micro-batch (``TWIN_SCALE``: lab 06's layer_scale with b = 2, where the ratio
of gradient bytes and the ratio of activation bytes agree, 8192 each). ``planner_model`` is the
same shape for calc: 4 layers of h = 4096, a vocabulary the embedding's share of the tiny model.
"""

from __future__ import annotations

from typing import Any, Sequence

from lab_utils import calc, twin
from lab_utils.experiments.common import marked_sgd_steps, rank_batches
from lab_utils.experiments.lab06.twin import layer_scale
from lab_utils.experiments.lab08.training import CFG, train_3d
from lab_utils.models import TinyGPT

MICRO, GLOBAL_BATCH, FULL_SEQ = 2, 16, 2048  # rows per micro-batch, rows per step, charged seq
TWIN_SCALE = layer_scale(CFG, MICRO, full_b=MICRO)


def shard_steps(ctx: Any, mode: str, steps: int = 2) -> list[float]:
    """FSDP2 of TinyGPT (each block, then the root) on a 1-D mesh of every rank ("fsdp"), or on
    a (nodes, GPUs per node) mesh that replicates across nodes and shards inside one ("hsdp",
    two nodes). SGD; every step marked on the emulated clock. Returns this rank's losses."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if mode not in ("fsdp", "hsdp"):
        raise ValueError(f"mode must be 'fsdp' or 'hsdp', got {mode!r}")
    shape = (ctx.world_size,) if mode == "fsdp" else (2, ctx.world_size // 2)
    names = ("shard",) if mode == "fsdp" else ("replicate", "shard")
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    model = TinyGPT(CFG, seed=0)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return marked_sgd_steps(
        model, model, rank_batches(ctx, CFG, GLOBAL_BATCH // ctx.world_size, steps)
    )


def layout_steps(ctx: Any, dp: int, tp: int, pp: int) -> list[float]:
    """One step of train_3d at GLOBAL_BATCH rows: m = GLOBAL_BATCH / (dp MICRO) micro-batches."""
    return train_3d(ctx, 1, GLOBAL_BATCH // (dp * MICRO), MICRO, dp=dp, tp=tp, pp=pp).losses


def planner_model() -> calc.ModelConfig:
    """The charged model for calc: CFG's depth and heads at h = 4096 (the embedding keeps its
    share of the tiny model's parameters: V / C = 2)."""
    return calc.ModelConfig(
        vocab_size=2 * 4096, hidden=4096, n_layers=CFG.n_layer, n_heads=CFG.n_head
    )


def planner_cluster(cluster: twin.Cluster) -> calc.Cluster:
    """The emulated cluster as the planner sees it (the same GPU, links and latencies)."""
    d = calc.DEVICES[cluster.gpu]
    return calc.Cluster(
        cluster.gpus_per_node,
        cluster.nodes,
        d.memory_bytes,
        cluster.intra.bytes_per_s,
        cluster.inter.bytes_per_s,
        cluster.peak_flops,
        cluster.intra.latency_s,
        cluster.inter.latency_s,
        cluster.name,
    )


def planner_step(dp: int, tp: int, pp: int, cluster: twin.Cluster) -> calc.Plan:
    """calc's plan of one layout at the emulated run's batch: no ZeRO, no recomputation, the
    cluster's one compute efficiency (the planner overlaps nothing)."""
    return calc.check_config(
        planner_model(),
        planner_cluster(cluster),
        GLOBAL_BATCH,
        FULL_SEQ,
        dp=dp,
        tp=tp,
        pp=pp,
        zero_stage=0,
        micro_batch=MICRO,
        recompute="none",
        compute_efficiency=cluster.efficiency,
        allow_tp_across_nodes=True,
    )


def layout_rows(
    runs: dict[tuple[int, int, int], twin.Emulation], cluster: twin.Cluster
) -> list[dict]:
    """Each layout's emulated step and the planner's, with both ranks (1 = fastest)."""
    emu = {k: em.makespan for k, em in runs.items()}
    plan = {k: planner_step(*k, cluster).step_s for k in runs}

    def rank(times: dict) -> dict:
        return {k: i + 1 for i, k in enumerate(sorted(times, key=times.get))}

    er, pr = rank(emu), rank(plan)
    return [
        {
            "layout": f"dp={d} tp={t} pp={p}",
            "emulated step (ms)": 1e3 * emu[(d, t, p)],
            "emulated rank": er[(d, t, p)],
            "planner step (ms)": 1e3 * plan[(d, t, p)],
            "planner rank": pr[(d, t, p)],
        }
        for (d, t, p) in sorted(runs, key=emu.get)
    ]


def same_losses(runs: Sequence[Any]) -> bool:
    """Every run's first loss equal to float rounding (the layouts compute the same model)."""
    first = [r.results[0][0] for r in runs]
    return max(first) - min(first) < 1e-5 * abs(first[0])
