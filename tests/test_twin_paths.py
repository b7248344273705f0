"""Every path into the emulated cluster on 4 ranks over 2 emulated nodes, against a plain gloo run
(same numbers) and hand-computed emulated times: the default group, sub-groups inside a node and
across nodes, async work overlapping compute, FSDP2 on a DeviceMesh, all-to-all, batched
send/recv, an async collective followed by a send (no deadlock: a collective never blocks at
issue), and calls the emulator does not model or own (run, charged nothing, reported once)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from lab_utils import run, twin
from lab_utils.calc.comm import collective_time, group_collective_time

C = twin.Cluster(
    nodes=2,
    gpus_per_node=2,
    peak_flops=1e12,
    efficiency=0.5,
    intra=twin.Link("nv", 1e-6, 100e9),
    inter=twin.Link("ib", 10e-6, 10e9),
)
MM = 2 * 64 * 64 * 64  # FLOPs of one 64 x 64 x 64 matmul


def _since(t0):
    now = twin.now()
    return None if now is None else now - t0


def paths(ctx):
    r, out, dt = ctx.rank, {}, {}
    t = torch.full((4,), float(r))
    dist.all_reduce(t)  # the DEFAULT group
    out["default"] = t.tolist()
    groups = {
        k: [dist.new_group(g) for g in gs]
        for k, gs in (("intra", ([0, 1], [2, 3])), ("inter", ([0, 2], [1, 3])))
    }
    for kind, (g0, g1) in groups.items():
        x = torch.full((1000,), float(r))
        dist.barrier()
        t0 = twin.now() or 0.0
        dist.all_reduce(x, group=g0 if r in ((0, 1) if kind == "intra" else (0, 2)) else g1)
        out[kind], dt[kind] = x[0].item(), _since(t0)
    dist.barrier()
    t0 = twin.now() or 0.0
    if r == 1:
        torch.randn(64, 64) @ torch.randn(64, 64)  # rank 1 arrives late
    y = torch.ones(1)
    dist.all_reduce(y, group=ctx.group)
    dt["late"] = _since(t0)
    dist.barrier()
    t0 = twin.now() or 0.0
    big = torch.ones(250_000)
    work = dist.all_reduce(big, async_op=True)  # 1 MB on the comm stream...
    for _ in range(20):
        torch.randn(64, 64) @ torch.randn(64, 64)  # ...while this computes
    dt["before_wait"] = _since(t0)
    work.wait()
    dt["async"], out["async"] = _since(t0), big[0].item()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    f = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(2)])
    for layer in f:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(f, mesh=mesh["dp"])
    f(torch.randn(4, 16) + r).sum().backward()
    out["fsdp"] = [p.grad.to_local().sum().item() for p in f.parameters()]  # this shard
    a2a = torch.empty(8)
    dist.all_to_all_single(a2a, torch.arange(8.0) + 10 * r)
    out["a2a"] = a2a.tolist()
    w = ctx.world_size
    send, recv = torch.full((16,), float(r)), torch.empty(16)
    for q in dist.batch_isend_irecv(
        [dist.P2POp(dist.isend, send, (r + 1) % w), dist.P2POp(dist.irecv, recv, (r - 1) % w)]
    ):
        q.wait()
    out["p2p"] = recv[0].item()
    gathered = [torch.empty(2) for _ in range(w)] if r == 0 else None
    dist.gather(torch.full((2,), float(r)), gathered, dst=0)
    out["gather"] = [g[0].item() for g in gathered] if r == 0 else None
    pair = groups["intra"][r // 2]  # async collective, then a send to a rank that issues
    x, y = torch.full((8,), float(r)), torch.full((4,), float(r))  # it only after its recv
    if r % 2 == 0:
        work = dist.all_reduce(x, group=pair, async_op=True)
        dist.send(y, r + 1)
        work.wait()
    else:
        dist.recv(y, r - 1)
        dist.all_reduce(x, group=pair)
    out["async_then_send"] = (x[0].item(), y[0].item())
    real = dist.new_group([0, 1, 2, 3], backend="gloo")  # a group the twin does not own
    z = torch.ones(1)
    dist.all_reduce(z, group=real)
    out["real_gloo"] = z.item()
    return out, dt


@pytest.fixture(scope="module")
def runs():
    return (
        twin.emulate(paths, 4, C, quiet=True, timeout_s=120),
        run(paths, 4, backend="gloo", quiet=True, timeout_s=120),
    )


def test_same_numbers_as_plain_gloo(runs):
    em, plain = runs
    assert [o for o, _ in em.results] == [o for o, _ in plain]
    assert em.results[0][0]["gather"] == [0.0, 1.0, 2.0, 3.0]


def test_every_call_was_seen(runs):
    calls = runs[0].records[0].calls
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv"):
        assert calls.get(op, 0) >= 1, op


def test_unmodelled_calls_ran_and_were_reported_once(runs):
    # gather: not modelled; an all-reduce on a group made with backend="gloo": not the twin's
    assert runs[0].unknown == ["c10d.allreduce_", "c10d.gather_"]
    assert all(len(rec.unknown) == len(set(rec.unknown)) for rec in runs[0].records)


def test_a_group_pays_the_links_it_spans(runs):
    for _, dt in runs[0].results:
        assert dt["intra"] == pytest.approx(collective_time("all_reduce", 2, 4000, 1e-6, 100e9))
        assert dt["inter"] == pytest.approx(collective_time("all_reduce", 2, 4000, 10e-6, 10e9))


def test_a_collective_starts_when_the_last_rank_arrives(runs):
    late = MM / 5e11
    cost = group_collective_time("all_reduce", 4, 2, 2, 4, 1e-6, 100e9, 10e-6, 10e9)
    assert all(dt["late"] == pytest.approx(late + cost) for _, dt in runs[0].results)


def test_async_work_overlaps_compute_until_wait(runs):
    cost = group_collective_time("all_reduce", 4, 2, 2, 1e6, 1e-6, 100e9, 10e-6, 10e9)
    compute = 20 * MM / 5e11
    assert compute < cost
    for _, dt in runs[0].results:
        assert dt["before_wait"] == pytest.approx(compute)  # the rank did not wait
        assert dt["async"] == pytest.approx(cost)  # compute hid under the comm
    assert all(v is None for _, dt in runs[1] for v in dt.values())


def torch_gpipe(ctx):
    """torch.distributed.pipelining's GPipe over one Linear per stage (lab 07's builder)."""
    from lab_utils.parallel.pipeline_parallel.torch_schedules import build_schedule
    from lab_utils.twin.grid import H, _linears

    r, p = ctx.rank, ctx.world_size
    mod = _linears(1, seed=r)
    sched = build_schedule("gpipe", [mod], [r], ctx, 4, lambda y, t: ((y - t) ** 2).mean())
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 4, H, generator=g), torch.randn(8, 4, H, generator=g)
    if r == 0:
        sched.step(x)
    elif r == p - 1:
        sched.step(target=y, losses=[])
    else:
        sched.step()
    return mod[0].weight.grad.sum().item()


def test_torch_pipelining_is_seen_and_exact():
    kw = dict(quiet=True, timeout_s=120, preload=("torch.distributed.pipelining",))
    em = twin.emulate(torch_gpipe, 4, C, **kw)
    assert em.results == list(run(torch_gpipe, 4, backend="gloo", **kw))
    assert em.unknown == []
    calls = em.records[1].calls  # a middle stage receives and sends both ways
    assert calls["send"] >= 8 and calls["recv"] >= 8
    assert em.busy(1, "p2p") > 0 and em.makespan > 0
