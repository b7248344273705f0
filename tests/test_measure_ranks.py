"""CommLedger, Timeline and model_state_bytes on real ranks (gloo): two launches in all.

Launch 1 (4 ranks): hand-written collectives and p2p; bytes equal the ring formulas exactly.
Launch 2 (2 ranks): torch DDP, FSDP2 (fully_shard) and DTensor TP (parallelize_module).
"""

import torch
import torch.distributed as dist

from lab_utils import run
from lab_utils.calc import ring_bytes_per_rank


def _hand_written(ctx):
    from lab_utils.measure import CommLedger, Timeline

    n, r = ctx.world_size, ctx.rank
    tl = Timeline(ctx)
    x = torch.arange(1024, dtype=torch.float32) + r  # D = 4096 bytes
    with CommLedger() as led:
        with led.phase("collectives"), tl.span("collectives", step=0):
            dist.all_reduce(x)
            dist.broadcast(x, src=0)
            dist.reduce(x, dst=0)
            out = torch.empty(1024 * n)
            dist.all_gather_into_tensor(out, x)
            shard = torch.empty(1024 // n)
            dist.reduce_scatter_tensor(shard, x)
            dist.all_to_all_single(torch.empty(1024), x)
            dist.barrier()
        with led.phase("p2p"), tl.span("p2p", step=0), CommLedger() as inner:  # ledgers nest
            # a ring of isend/irecv: every rank sends 256 floats right, receives from the left
            buf = torch.empty(256)
            ops = [
                dist.P2POp(dist.isend, x[:256].clone(), (r + 1) % n),
                dist.P2POp(dist.irecv, buf, (r - 1) % n),
            ]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
    summary = led.summary()
    barrier_tl = Timeline(ctx, align="barrier")  # multi-node style clock: from a shared barrier
    with barrier_tl.span("after_barrier"):
        pass
    return {
        "inner": inner.count(),
        "barrier_events": barrier_tl.gather(),
        "ops": [
            (rec.op, rec.bytes_sent, rec.tensor_bytes, rec.group_size, rec.phase)
            for rec in led.records
        ],
        "durations": [rec.duration_s for rec in led.records],
        "count_p2p": led.count(phase="p2p"),
        "sent_all": led.bytes_sent(),
        "summary_ok": summary["count"] == len(led.records),
        "events": tl.gather(),
    }


def test_ledger_hand_written_collectives_and_timeline():
    n, d = 4, 4096
    res = run(_hand_written, n, timeout_s=90, quiet=True)
    expected = [
        ("all_reduce", ring_bytes_per_rank("all_reduce", n, d), d),
        ("broadcast", ring_bytes_per_rank("broadcast", n, d), d),
        ("reduce", ring_bytes_per_rank("reduce", n, d), d),
        ("all_gather", ring_bytes_per_rank("all_gather", n, n * d), n * d),
        ("reduce_scatter", ring_bytes_per_rank("reduce_scatter", n, d), d),
        ("all_to_all", ring_bytes_per_rank("all_to_all", n, d), d),
        ("barrier", 0.0, 0),
        ("send", 1024.0, 1024),
        ("recv", 0.0, 1024),
    ]
    for rank, out in enumerate(res):
        got = [(op, sent, tb) for op, sent, tb, _, _ in out["ops"]]
        assert got == expected, f"rank {rank}: {got}"
        assert all(size == n for _, _, _, size, _ in out["ops"])
        assert out["ops"][0][1] == 2 * (n - 1) / n * d  # 2(N-1)/N D, exactly
        assert out["count_p2p"] == 2 and out["summary_ok"]
        assert out["sent_all"] == sum(e[1] for e in expected)
        assert all(t is not None and t >= 0 for t in out["durations"])
    assert all(out["inner"] == 2 for out in res)
    be = res[0]["barrier_events"]
    assert [e["rank"] for e in sorted(be, key=lambda e: e["rank"])] == list(range(n))
    assert min(e["start"] for e in be) == 0.0 and all(e["end"] >= e["start"] for e in be)
    events = res[0]["events"]
    assert all(r["events"] is None for r in res[1:])
    assert sorted((e["rank"], e["name"]) for e in events) == sorted(
        (r, s) for r in range(n) for s in ("collectives", "p2p")
    )
    assert min(e["start"] for e in events) == 0.0
    for r in range(n):  # each rank's p2p span starts after its collectives span ended
        mine = {e["name"]: e for e in events if e["rank"] == r}
        assert mine["p2p"]["start"] >= mine["collectives"]["end"] > 0
        assert mine["p2p"]["step"] == 0


def _torch_parallel(ctx):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )
    from torch.nn.parallel import DistributedDataParallel as DDP

    from lab_utils.measure import CommLedger, model_state_bytes
    from lab_utils.models import GPTConfig, TinyGPT, ToyMLP

    out = {}
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(ctx.rank))
    # DDP: the C++ reducer's bucket all-reduces
    ddp = DDP(ToyMLP())
    with CommLedger() as led:
        ddp(torch.randn(8, 16)).sum().backward()
    out["ddp"] = (led.count("all_reduce"), led.bytes_sent("all_reduce"), led.count())
    out["ddp_grad_bytes"] = sum(p.grad.numel() * 4 for p in ddp.parameters())
    # FSDP2: per-layer all-gathers (forward and backward) and reduce-scatters
    gpt = TinyGPT(GPTConfig())
    out["gpt_bytes"] = sum(p.numel() * 4 for p in gpt.parameters())
    for block in gpt.blocks:
        fully_shard(block)
    fully_shard(gpt)
    opt = torch.optim.AdamW(gpt.parameters(), lr=1e-3)
    with CommLedger() as led:
        with led.phase("forward"):
            loss = gpt(idx).sum()
        with led.phase("backward"):
            loss.backward()
    opt.step()
    out["fsdp"] = {
        (op, ph): (led.count(op, ph), led.tensor_bytes(op, ph), led.bytes_sent(op, ph))
        for op in ("all_gather", "reduce_scatter")
        for ph in ("forward", "backward")
    }
    out["fsdp_state"] = model_state_bytes(gpt, opt)
    # DTensor TP on the MLPs: our count must equal CommDebugMode's
    tp = TinyGPT(GPTConfig())
    mesh = init_device_mesh("cpu", (ctx.world_size,))
    plan = {}
    for i in range(tp.cfg.n_layer):
        plan.update(
            {f"blocks.{i}.mlp.fc": ColwiseParallel(), f"blocks.{i}.mlp.proj": RowwiseParallel()}
        )
    parallelize_module(tp, mesh, plan)
    cdm = CommDebugMode()
    with cdm, CommLedger() as led:
        with led.phase("forward"):
            y = tp(idx).sum()
        y.backward()
    out["tp"] = (
        led.count(),
        led.count("all_reduce", "forward"),
        cdm.get_total_counts(),
        led.bytes_sent("all_reduce", "forward"),
    )
    return out


def test_ledger_sees_ddp_fsdp2_and_tp():
    n = 2
    res = run(_torch_parallel, n, timeout_s=120, quiet=True)
    for out in res:
        count, sent, total = out["ddp"]
        assert count >= 1 and total == count  # only bucket all-reduces in backward
        assert sent == 2 * (n - 1) / n * out["ddp_grad_bytes"]
        p = out["gpt_bytes"]
        layers = 2  # GPTConfig default n_layer; root = embeddings, ln_f, head
        ag_f, ag_b = out["fsdp"][("all_gather", "forward")], out["fsdp"][("all_gather", "backward")]
        rs_b = out["fsdp"][("reduce_scatter", "backward")]
        assert ag_f[0] == layers + 1 and ag_f[1] == p  # every parameter gathered once forward
        assert ag_f[2] == (n - 1) / n * p
        assert ag_b[0] == layers  # blocks re-gathered for backward; the root stayed unsharded
        assert rs_b[0] == layers + 1 and rs_b[1] == p and rs_b[2] == (n - 1) / n * p
        assert out["fsdp"][("reduce_scatter", "forward")][0] == 0
        st = out["fsdp_state"]  # DTensor local shards: each rank holds 1/n of everything
        assert st["params"] == p / n and st["grads"] == p / n and st["optimizer_state"] == 2 * p / n
        total, fwd, cdm_total, fwd_sent = out["tp"]
        assert total == cdm_total and fwd == 2  # one all-reduce per row-parallel proj
        assert fwd_sent == 2 * 2 * (n - 1) / n * (2 * 16 * 32 * 4)  # b*s*h fp32 each


def _async_race(ctx, steps):
    """Many tiny async collectives, each record read the instant its wait() returns."""
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from lab_utils.measure import CommLedger

    x = torch.ones(8)
    with CommLedger() as led:
        for i in range(steps):
            dist.all_reduce(x, async_op=True).wait()
            assert led.records[-1].duration_s is not None, f"all_reduce {i}: duration_s None"
    # torch DDP: 8 small layers in 1 KB buckets, records read as soon as backward returns
    model = DDP(nn.Sequential(*[nn.Linear(16, 16) for _ in range(8)]), bucket_cap_mb=1 / 1024)
    with CommLedger() as led:
        for step in range(steps // 4):
            model(torch.randn(4, 16)).sum().backward()
            missing = sum(r.duration_s is None for r in led.records)
            assert missing == 0, f"DDP step {step}: {missing} bucket records with duration_s None"
            led.clear()


def test_ledger_records_complete_right_after_wait(on_ranks):
    # Before the fix ~2% of such records had duration_s None: the future's callback that
    # stamps it runs on gloo's thread just AFTER wait() has returned to the caller.
    on_ranks(_async_race, 4, 400, timeout_s=180)
