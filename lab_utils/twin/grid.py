"""The validation grid: small real workloads run on the emulated cluster, each beside calc's
analytic time for the same step (``python -m lab_utils twin validate``, part a).

Every workload is made of bias-free ``nn.Linear`` layers, so its FLOPs have a closed form (2 b n k
per matmul) and the analytic side needs no measurement: compute from FLOPs at peak x efficiency,
communication from ``calc.comm``, the pipeline's idle time from ``calc.pipeline.bubble``. The
emulated side runs the real code (torch DDP, FSDP2, lab_utils.parallel's TP layers and pipeline
schedules) and reads the virtual clock. ``GRID_SCALE`` charges 1e5 x the FLOPs and 100 x the
bytes so the tiny layers weigh like a GPU-sized model's (the same factors on both sides).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.calc.comm import collective_time, group_collective_time
from lab_utils.calc.pipeline import bubble
from lab_utils.twin.scale import Scale
from lab_utils.twin.topology import Cluster

H, B, L = 256, 64, 4  # hidden, rows per rank, layers (DDP, FSDP)
P, M, MB, T = 4, 8, 2, 16  # pipeline: stages, micro-batches, micro-batch, tokens
GRID_SCALE = Scale(flops=1e5, bytes=1e2, name="validation grid (1e5 x FLOPs, 100 x bytes)")
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")


def grid_cluster() -> Cluster:
    """2 DGX H100 nodes, 2 GPUs of each: groups inside a node and across nodes."""
    return Cluster.preset("DGX H100", nodes=2, gpus_per_node=2)


def _linears(n: int, h: int = H, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*[nn.Linear(h, h, bias=False) for _ in range(n)])


def _timed(fn: Any) -> float:
    from lab_utils import twin

    dist.barrier()  # every rank starts the step at the same emulated time
    t0 = twin.step()
    fn()
    return twin.step() - t0


def ddp_step(ctx: Any) -> float:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(_linears(L), bucket_cap_mb=1000)  # one bucket: all-reduced after backward
    x = torch.randn(B, H)
    return _timed(lambda: model(x).sum().backward())


def fsdp_step(ctx: Any) -> float:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = fully_shard(_linears(L), mesh=init_device_mesh("cpu", (ctx.world_size,)))
    x = torch.randn(B, H)
    return _timed(lambda: model(x).sum().backward())


def tp_step(ctx: Any) -> float:
    from lab_utils.parallel.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    g = groups[ctx.rank // 2]
    torch.manual_seed(0)
    col = ColumnParallelLinear(nn.Linear(H, 4 * H, bias=False), g)
    row = RowParallelLinear(nn.Linear(4 * H, H, bias=False), g)
    x = torch.randn(B, H, requires_grad=True)
    return _timed(lambda: row(col(x)).sum().backward())


def pipeline_step(ctx: Any, schedule: str) -> float:
    from lab_utils.parallel.pipeline_parallel.schedules import SCHEDULES as FNS
    from lab_utils.parallel.pipeline_parallel.stage import StageWorker

    fn, v, _ = FNS[schedule]
    n, r = P * v, ctx.rank
    g = torch.Generator().manual_seed(0)
    # one Linear per stage, float inputs; the last stage's H outputs are the logits of H classes
    xs = [torch.randn(MB, T, H, generator=g) for _ in range(M)]
    ys = [torch.randint(0, H, (MB, T), generator=g) for _ in range(M)]
    workers = []
    for c in range(v):
        k = c * P + r
        workers.append(
            StageWorker(
                _linears(1, seed=k),
                k,
                n,
                (k - 1) % P if k else None,
                (k + 1) % P if k < n - 1 else None,
                xs,
                ys,
                (MB, T, H),
                tag=1000 * SCHEDULES.index(schedule),
            )
        )

    def go() -> None:
        fn(workers) if v > 1 else fn(workers[0])
        for w in workers:
            w.finish()

    return _timed(go)


def _tp_mlp(g: Any, seed: int) -> nn.Module:
    from lab_utils.parallel.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    torch.manual_seed(seed)
    return nn.Sequential(
        ColumnParallelLinear(nn.Linear(H, 4 * H, bias=False), g),
        RowParallelLinear(nn.Linear(4 * H, H, bias=False), g),
    )


def step_3d(ctx: Any) -> dict[str, float]:
    """pp=2 (one stage per node) x dp=2 x tp=2 on 8 ranks: 1F1B over TP MLP stages, then the
    data-parallel all-reduce of each rank's gradient shards. Rank = 4 stage + 2 d + t."""
    from lab_utils.parallel.pipeline_parallel.schedules import one_f_one_b
    from lab_utils.parallel.pipeline_parallel.stage import StageWorker

    r = ctx.rank
    st, d, t = r // 4, (r // 2) % 2, r % 2
    tps = {
        (a, b): dist.new_group([4 * a + 2 * b, 4 * a + 2 * b + 1])
        for a in range(2)
        for b in range(2)
    }
    dps = {(a, c): dist.new_group([4 * a + c, 4 * a + 2 + c]) for a in range(2) for c in range(2)}
    g = torch.Generator().manual_seed(d)
    xs = [torch.randn(MB, T, H, generator=g).requires_grad_() for _ in range(M // 2)]
    ys = [torch.randint(0, H, (MB, T), generator=g) for _ in range(M // 2)]
    w = StageWorker(
        _tp_mlp(tps[st, d], st),
        st,
        2,
        r - 4 if st else None,
        r + 4 if st == 0 else None,
        xs,
        ys,
        (MB, T, H),
        tag=5000,
    )

    def go() -> None:
        one_f_one_b(w)
        w.finish()
        flat = torch.cat([q.grad.reshape(-1) for q in w.params])
        dist.all_reduce(flat, group=dps[st, t])

    return {"3d": _timed(go)}


def run_grid(ctx: Any) -> dict[str, float]:
    """Every grid workload on this rank; emulated seconds of each step."""
    out = {"ddp": ddp_step(ctx), "fsdp": fsdp_step(ctx), "tp": tp_step(ctx)}
    for s in SCHEDULES:
        out[f"pp-{s}"] = pipeline_step(ctx, s)
    return out


# ------------------------------------------------------------------------ analytic side
def _coll(c: Cluster, op: str, ranks: list[int], nbytes: float) -> float:
    sp = c.span(ranks)
    return group_collective_time(
        op,
        sp.size,
        sp.nodes,
        sp.per_node,
        nbytes * GRID_SCALE.bytes,
        c.intra.latency_s,
        c.intra.bytes_per_s,
        c.inter.latency_s,
        c.inter.bytes_per_s,
    )


def _flops_s(c: Cluster, flops: float) -> float:
    return flops * GRID_SCALE.flops / c.flops_per_s


def cluster_3d() -> Cluster:
    """2 DGX H100 nodes, 4 GPUs of each: a pipeline stage per node, dp x tp inside."""
    return Cluster.preset("DGX H100", nodes=2, gpus_per_node=4)


def analytic_3d(c: Cluster) -> dict[str, tuple[float, str]]:
    """1F1B on 2 stages: (m + p - 1)(t_f + t_b) + p2p there and back + DP all-reduce."""
    m, mm = M // 2, 2 * MB * T * H * 4 * H / 2  # one TP-sharded matmul of the MLP
    ar = _coll(c, "all_reduce", [0, 1], 4 * MB * T * H)
    t_f, t_b = _flops_s(c, 2 * mm) + ar, _flops_s(c, 4 * mm) + ar
    ideal = m * (t_f + t_b)
    idle = bubble("1f1b", 2, m, 1, t_f, t_b).of_ideal * ideal
    hop = collective_time(
        "send_recv", 2, 4 * MB * T * H * GRID_SCALE.bytes, c.inter.latency_s, c.inter.bytes_per_s
    )
    sync = _coll(c, "all_reduce", [0, 2], 4 * 2 * 4 * H * H / 2)
    return {
        "3d": (
            ideal + idle + 2 * hop + sync,
            "pp2 x dp2 x tp2: 1F1B of TP stages + p2p + DP all_reduce(grad shards)",
        )
    }


def analytic(c: Cluster) -> dict[str, tuple[float, str]]:
    """calc's time for each grid step, with the formula it used."""
    world = list(range(c.world_size))
    mm = 2 * B * H * H  # one h x h matmul on B rows
    # forward L, weight grads L, input grads L - 1 (the input needs none)
    comp = _flops_s(c, (3 * L - 1) * mm)
    w_bytes = 4 * L * H * H
    out = {
        "ddp": (
            comp + _coll(c, "all_reduce", world, w_bytes),
            "F + B + all_reduce(W)  (one bucket, after backward)",
        ),
        "fsdp": (
            comp
            + _coll(c, "all_gather", world, w_bytes)
            + _coll(c, "reduce_scatter", world, w_bytes),
            "all_gather(W) + F + B + reduce_scatter(W)  (root unit kept for backward)",
        ),
    }
    tp_comp = _flops_s(c, 3 * 2 * (2 * B * H * 4 * H / 2))  # 2 matmuls, x3 with backward
    out["tp"] = (
        tp_comp + 2 * _coll(c, "all_reduce", [0, 1], 4 * B * H),
        "3 x F/t + 2 all_reduce(b h)  (Megatron f and g, t = 2 in a node)",
    )
    for s in SCHEDULES:
        v = 2 if s == "interleaved" else 1
        t_f = _flops_s(c, 2 * MB * T * H * H) * v  # one micro-batch, all chunks of a rank
        hops = []  # stage k -> k + 1, every boundary of the pipe
        for k in range(P * v - 1):
            a, b = k % P, (k + 1) % P
            link = c.intra if c.node_of(a) == c.node_of(b) else c.inter
            hops.append(
                collective_time(
                    "send_recv",
                    2,
                    4 * MB * T * H * GRID_SCALE.bytes,
                    link.latency_s,
                    link.bytes_per_s,
                )
            )
        kw = dict(t_w=t_f) if s.startswith("zb") else {}
        idle = bubble(s, P, M, v, t_f, 2 * t_f, **kw).of_ideal * M * 3 * t_f
        fill = 2 * sum(hops) / v  # fill and drain cross every boundary once each way
        out[f"pp-{s}"] = (
            M * 3 * t_f + idle + fill,
            f"m (t_f + t_b) + calc.pipeline.bubble({s!r}) + p2p fill/drain",
        )
    return out
