"""Lab 04's pieces on real ranks: the averaging convention, naive DDP's average_gradients, the
lab's experiments (exactness bound, bytes, accumulation, hooks) and the naive-DDP exercise's
acceptance of correct but unusual solutions."""

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from lab_utils import run
from lab_utils.calc import dp_bytes_per_rank, ring_bytes_per_rank
from lab_utils.data import token_batches
from lab_utils.experiments import lab04
from lab_utils.experiments.lab04 import details as lab04_details
from lab_utils.models import GPTConfig, TinyGPT, ToyMLP
from lab_utils.parallel.data_parallel import average_gradients
from lab_utils.reference import forward_backward

PRELOAD = ("torch._dynamo",)
SMALL = GPTConfig(vocab_size=64, seq_len=16, n_layer=2, n_head=2, d_model=32)


def _avg_is_pre_divided_sum(ctx):
    """gloo has ReduceOp.AVG (torch 2.13), and it equals divide-by-N-then-SUM bit for bit when N
    is a power of two (the convention data_parallel.py states)."""
    g = torch.Generator().manual_seed(ctx.rank)
    x = torch.randn(1000, generator=g) * 10 ** torch.randint(-3, 4, (1000,), generator=g)
    avg, pre = x.clone(), x.clone() / ctx.world_size
    dist.all_reduce(avg, op=dist.ReduceOp.AVG, group=ctx.group)
    dist.all_reduce(pre, op=dist.ReduceOp.SUM, group=ctx.group)
    return torch.equal(avg, pre), (avg - pre).abs().max().item()


@pytest.mark.parametrize("n", [2, 4])
def test_gloo_has_avg_and_it_equals_the_pre_divided_sum(n):
    for equal, diff in run(_avg_is_pre_divided_sum, n, backend="gloo", quiet=True):
        assert equal, f"AVG and pre-divided SUM differ by {diff}"


def _average_gradients_matches_torch_ddp(ctx):
    """average_gradients on a sub-group equals torch DDP's gradients on the same sub-group."""
    ranks = [1, 3] if ctx.world_size == 4 else list(range(ctx.world_size))
    sub = dist.new_group(ranks)
    out = None
    if ctx.rank in ranks:
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(10 + ctx.rank))
        y = torch.randn(4, 16, generator=torch.Generator().manual_seed(20 + ctx.rank))
        ours, theirs = ToyMLP(seed=0, freeze_first=True), ToyMLP(seed=0, freeze_first=True)
        nn.functional.mse_loss(ours(x), y).backward()
        average_gradients(ours, sub)
        ddp = DistributedDataParallel(theirs, process_group=sub)
        nn.functional.mse_loss(ddp(x), y).backward()
        out = [
            (
                n,
                a.grad is None,
                b.grad is None,
                0.0 if a.grad is None else (a.grad - b.grad).abs().max().item(),
            )
            for (n, a), b in zip(ours.named_parameters(), theirs.parameters())
        ]
    dist.barrier(group=ctx.group)
    return out


def test_average_gradients_equals_torch_ddp_on_a_sub_group():
    results = [
        r
        for r in run(
            _average_gradients_matches_torch_ddp, 4, backend="gloo", quiet=True, preload=PRELOAD
        )
        if r is not None
    ]
    assert len(results) == 2
    for rows in results:
        for name, ours_none, torch_none, diff in rows:
            assert ours_none == torch_none, name  # the frozen layer keeps no gradient
            assert diff < 1e-6, (name, diff)


def test_exactness_gradients_within_the_rounding_bound():
    steps, n, batch = 2, 2, 2
    res = run(lab04.exactness, n, SMALL, batch, steps, backend="gloo", quiet=True, preload=PRELOAD)
    batches = token_batches(steps, batch * n, SMALL.seq_len, SMALL.vocab_size, seed=1)
    for dtype in (torch.float32, torch.float64):
        ref = TinyGPT(SMALL, seed=0).to(dtype)
        forward_backward(ref, batches[0])
        g_max = max(p.grad.abs().max().item() for p in ref.parameters())
        bound = 2 * (n * batch * SMALL.seq_len) * torch.finfo(dtype).eps / 2 * g_max
        for impl in lab04.IMPLS:
            got = res[0][impl, str(dtype).removeprefix("torch.")]
            assert len(got.losses) == steps
            for name, p in ref.named_parameters():
                assert (got.grads[name] - p.grad).abs().max().item() <= bound, (impl, dtype, name)


def test_bytes_per_step_ledger_is_the_formula_and_wire_adds_only_headers():
    n = 2
    res = run(lab04.bytes_per_step, n, SMALL, 2, 4096, backend="gloo", quiet=True, preload=PRELOAD)[
        0
    ]
    grad_bytes = 4 * sum(p.numel() for p in TinyGPT(SMALL).parameters())
    formula = dp_bytes_per_rank(grad_bytes, n)
    assert res["naive"].comm_count == len(list(TinyGPT(SMALL).parameters()))
    assert res["bucket"].comm_count < res["naive"].comm_count
    for impl, r in res.items():
        assert r.comm_bytes == pytest.approx(formula)
        if r.wire_bytes is not None:  # Linux: per-socket kernel counters
            assert 0 <= r.wire_bytes - formula <= 48 * 16 * (n - 1) * r.comm_count, impl


def test_accumulation_with_no_sync_sends_one_kth_and_keeps_the_gradients():
    accum = 4
    res = run(lab04_details.accumulation, 2, accum, backend="gloo", quiet=True, preload=PRELOAD)
    one = dp_bytes_per_rank(4 * sum(p.numel() for p in ToyMLP().parameters()), 2)
    for r in res:
        assert r[True].comm_bytes == pytest.approx(one)
        assert r[False].comm_bytes == pytest.approx(accum * one)
        for name, g in r[True].grads.items():
            torch.testing.assert_close(g, r[False].grads[name], rtol=1e-5, atol=1e-7)
        if r[True].wire_bytes is not None:
            assert r[True].wire_bytes * accum == pytest.approx(r[False].wire_bytes, rel=0.02)


def test_powersgd_floats_counts_factors_and_uncompressed_tensors():
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 16), nn.Linear(4, 4))
    # 64x64 at rank 1: 128 < 4096/2 -> factors; 16x64: 80 < 512 -> factors;
    # 4x4 at rank 1: 8 * 2 = 16, not < 16 -> sent whole; biases whole (64 + 16 + 4)
    assert lab04_details.powersgd_floats(model, 1) == 128 + 80 + 16 + 64 + 16 + 4


def test_comm_hooks_bytes_on_the_wire():
    hooks = ("none", "fp16", "bf16", "powersgd-1")
    res = run(
        lab04_details.comm_hooks, 2, SMALL, 2, 4, hooks, backend="gloo", quiet=True, preload=PRELOAD
    )[0]
    floats = sum(p.numel() for p in TinyGPT(SMALL).parameters())
    for hook in hooks:
        assert len(res[hook].losses) == 4 and all(torch.isfinite(torch.tensor(res[hook].losses)))
    if res["none"].wire_bytes is None:
        pytest.skip("no per-socket byte counters on this platform")
    none = res["none"].wire_bytes
    assert none >= ring_bytes_per_rank("all_reduce", 2, 4 * floats)
    for half in ("fp16", "bf16"):
        assert res[half].wire_bytes == pytest.approx(none / 2, rel=0.02)
    psgd = 4 * lab04_details.powersgd_floats(TinyGPT(SMALL), 1)
    assert psgd <= res["powersgd-1"].wire_bytes < 2 * psgd


def test_stale_sgd_hurts_with_staleness():
    fresh, stale = lab04_details.stale_sgd(0, 150), lab04_details.stale_sgd(16, 150)
    assert sum(fresh[-20:]) < sum(stale[-20:])


# ---- the naive_ddp exercise accepts correct but unusual solutions --------------------------
def flat_single_all_reduce(model, group):
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.AVG, group=group)
    for g, part in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(part.view_as(g))


def sum_then_divide(model, group):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad /= dist.get_world_size(group)


def avg_op_async(model, group):
    works = [
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=group, async_op=True)
        for p in model.parameters()
        if p.grad is not None
    ]
    for w in works:
        w.wait()


def test_naive_ddp_exercise_accepts_unusual_correct_solutions():
    from lab_utils.exercises import check_many

    results = check_many(
        [("naive_ddp", fn) for fn in (flat_single_all_reduce, sum_then_divide, avg_op_async)]
    )
    for r in results:
        assert r.passed, r.message
