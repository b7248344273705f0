"""Tensor parallelism (lab_utils.parallel.tensor_parallel: layers, comm) against the unsharded
modules, on real gloo ranks.

Two launches: 4 ranks (tp=2 as two groups, and tp=4) for forward/gradient equivalence and the
communication counts; 2 ranks for dropout RNG, parallelize_module (DTensor) and the simulated
link. Each check runs inside the worker and reports "ok" or its assertion message, so one failing
check names itself without hiding the others.
"""

import traceback

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from lab_utils import run
from lab_utils.calc.comm import ring_bytes_per_rank, tp_layer_comm
from lab_utils.experiments.lab06 import tp_group
from lab_utils.experiments.unshard import unshard
from lab_utils.models import GPTConfig, TinyGPT, lm_loss
from lab_utils.parallel import tensor_parallel as tpar

CFG = GPTConfig(vocab_size=64, seq_len=8, n_layer=2, n_head=4, d_model=32)
DROP = GPTConfig(vocab_size=64, seq_len=8, n_layer=2, n_head=4, d_model=32, dropout=0.2)
B = 3


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(64, (B, 8), generator=g), torch.randint(64, (B, 8), generator=g)


def checked(results, name, fn, *args):
    try:
        fn(*args)
        results[name] = "ok"
    except Exception:  # noqa: BLE001 - reported by the test that owns the name
        results[name] = traceback.format_exc(limit=-3)


def grads_match(model, ref, what):
    got, want = unshard(model, grads=True), {n: p.grad for n, p in ref.named_parameters()}
    assert got.keys() == want.keys(), f"{what}: names differ: {got.keys() ^ want.keys()}"
    for n in want:
        assert_close(got[n], want[n], msg=lambda m: f"{what} grad {n}: {m}")


# -- launch 1: equivalence and communication counts ----------------------------------------------


def check_linears(group, t):
    g = torch.Generator().manual_seed(1)
    lin, x = nn.Linear(8, 12), torch.randn(2, 4, 8, generator=g)
    nn.init.normal_(lin.bias, generator=g)
    for layer_fn, x_in in (
        (lambda: tpar.ColumnParallelLinear(lin, group, gather_output=True), x),
        (lambda: tpar.RowParallelLinear(lin, group), x.chunk(t, -1)[dist.get_rank(group)]),
    ):
        ref_x, x_in = x.clone().requires_grad_(), x_in.clone().requires_grad_()
        lin.zero_grad()
        ref = lin(ref_x)
        ref.square().sum().backward()
        layer = layer_fn()
        y = layer(x_in)
        y.square().sum().backward()
        assert_close(y, ref)
        want = (
            ref_x.grad if x_in.shape == x.shape else ref_x.grad.chunk(t, -1)[dist.get_rank(group)]
        )
        assert_close(x_in.grad, want)  # column: needs f's all-reduce; row: the local slice
        full = unshard(layer, grads=True)
        assert_close(full.get("weight", full.get("0.weight")), lin.weight.grad)
        assert_close(full.get("bias", full.get("0.bias")), lin.bias.grad)


def check_block_part(group, part, sp):
    """TPMLP / TPAttention alone: output and grads of input and parameters."""
    ref_block = TinyGPT(CFG, seed=1).blocks[0]
    ref = getattr(ref_block, part)
    make = tpar.TPMLP if part == "mlp" else tpar.TPAttention
    tp_mod = make(getattr(TinyGPT(CFG, seed=1).blocks[0], part), group, sp)
    x = torch.randn(B, 8, 32, generator=torch.Generator().manual_seed(2))
    rx, tx = x.clone().requires_grad_(), x.clone().requires_grad_()
    ry = ref(rx)
    ry.square().sum().backward()
    ty = tp_mod(tpar.scatter_to_sequence(tx, group) if sp else tx)
    ty = tpar.gather_from_sequence(ty, group, reduce_grad=False) if sp else ty
    ty.square().sum().backward()
    assert_close(ty, ry)
    assert_close(tx.grad, rx.grad)
    tpar.sync_sequence_parallel_grads(tp_mod, group)
    grads = unshard(tp_mod, grads=True)
    for n, p in ref.named_parameters():
        assert_close(grads[n], p.grad, msg=lambda m: f"{part} {n}: {m}")


def check_gpt(group, sp, vocab):
    idx, tgt = batch()
    ref = TinyGPT(CFG, seed=0)
    ref_loss = lm_loss(ref(idx), tgt)
    ref_loss.backward()
    model = tpar.tensor_parallelize(
        TinyGPT(CFG, seed=0), group, sequence_parallel=sp, vocab_parallel=vocab
    )
    loss = lm_loss(model(idx), tgt)
    loss.backward()
    tpar.sync_sequence_parallel_grads(model, group)
    assert_close(loss, ref_loss)
    grads_match(model, ref, f"sp={sp} vocab={vocab}")
    weights = unshard(model)
    for n, p in ref.named_parameters():
        assert_close(weights[n], p.detach())


def check_vocab_ce(group, t):
    g = torch.Generator().manual_seed(3)
    logits, y = (
        torch.randn(12, 64, generator=g, requires_grad=True),
        torch.randint(64, (12,), generator=g),
    )
    ref = F.cross_entropy(logits, y)
    ref.backward()
    r = dist.get_rank(group)
    local = logits.detach().chunk(t, -1)[r].clone().requires_grad_()
    loss = tpar.vocab_parallel_cross_entropy(local, y, group).mean()
    loss.backward()
    assert_close(loss, ref)
    assert_close(local.grad, logits.grad.chunk(t, -1)[r])


def check_comm_counts(group, t, sp):
    from lab_utils.measure import CommLedger

    idx, tgt = batch()
    model = tpar.tensor_parallelize(TinyGPT(CFG, seed=0), group, sequence_parallel=sp)
    with CommLedger() as ledger:
        with ledger.phase("forward"):
            loss = lm_loss(model(idx), tgt)
        with ledger.phase("backward"):
            loss.backward()
        with ledger.phase("sync"):
            tpar.sync_sequence_parallel_grads(model, group)
    L, per = CFG.n_layer, tp_layer_comm(B, 8, 32, t, bytes_per_elem=4, sequence_parallel=sp)
    c = {
        (op, ph): ledger.count(op, ph)
        for op in ("all_reduce", "all_gather", "reduce_scatter")
        for ph in ("forward", "backward", "sync")
    }
    if not sp:  # 2 per layer forward, 2 backward (Shoeybi et al. 2019); nothing else
        assert (c["all_reduce", "forward"], c["all_reduce", "backward"]) == (2 * L, 2 * L), c
        assert dict(per.ops)["all_reduce"] * L == 4 * L
        assert ledger.count() == 4 * L, c
        assert_close(ledger.bytes_sent(), per.bytes_per_rank * L)
    else:  # forward: 2 AG + 2 RS per layer, + 1 AG after the last block; backward: RS 2/layer,
        # AG 2/layer (of the RS) + 2/layer re-gathers + 1 (scatter before the first block)
        assert (c["all_gather", "forward"], c["reduce_scatter", "forward"]) == (2 * L + 1, 2 * L), c
        assert (c["reduce_scatter", "backward"], c["all_gather", "backward"]) == (
            2 * L,
            4 * L + 1,
        ), c
        assert c["all_reduce", "forward"] + c["all_reduce", "backward"] == 0, c
        assert c["all_reduce", "sync"] == 1, c  # LayerNorm + row bias grads, one coalesced call
        msg = B * 8 * 32 * 4
        rs = ledger.bytes_sent("reduce_scatter", "forward")
        assert_close(rs, 2 * L * ring_bytes_per_rank("reduce_scatter", t, msg))


def check_rejects(group, t):
    with pytest.raises(ValueError, match="divisible"):
        tpar.TPAttention(TinyGPT(GPTConfig(n_head=2, d_model=32), seed=0).blocks[0].attn, group)
    with pytest.raises(ValueError, match="rng"):
        tpar.tensor_parallelize(TinyGPT(DROP, seed=0), group)


def equivalence_worker(ctx):
    results = {}
    for t in (2, 4):
        group = tp_group(ctx, t)
        checked(results, f"linears-tp{t}", check_linears, group, t)
        for part in ("mlp", "attn"):
            for sp in (False, True):
                checked(results, f"{part}-sp{int(sp)}-tp{t}", check_block_part, group, part, sp)
        for sp, vocab in ((False, False), (True, False), (False, True), (True, True)):
            checked(
                results, f"gpt-sp{int(sp)}-vocab{int(vocab)}-tp{t}", check_gpt, group, sp, vocab
            )
        checked(results, f"vocab-ce-tp{t}", check_vocab_ce, group, t)
        for sp in (False, True):
            checked(results, f"comm-sp{int(sp)}-tp{t}", check_comm_counts, group, t, sp)
    checked(results, "rejects-tp4", check_rejects, group, 4)
    return results


# -- launch 2 (2 ranks): dropout RNG, parallelize_module, simulated link --------------------------


def dropout_step(group, seed_bug, sp):
    """One step of a TP model with dropout; the unsharded model replays the TP masks."""
    idx, tgt = batch(5)
    rng = tpar.seed_tensor_parallel(7, group)
    if seed_bug:  # the data-parallel habit: a different seed on every rank
        torch.manual_seed(7 + dist.get_rank())
    model = tpar.tensor_parallelize(TinyGPT(DROP, seed=0), group, sequence_parallel=sp, rng=rng)
    tpar.set_recording(model)
    logits = model(idx)
    lm_loss(logits, tgt).backward()
    tpar.sync_sequence_parallel_grads(model, group)
    masks = tpar.full_dropout_masks(model, group)
    ref = tpar.replay_dropout_masks(TinyGPT(DROP, seed=0), masks)
    ref_logits = ref(idx)
    lm_loss(ref_logits, tgt).backward()
    others = [torch.empty_like(logits) for _ in range(dist.get_world_size(group))]
    dist.all_gather(others, logits.detach(), group=group)
    return model, ref, logits, ref_logits, others


def check_dropout(group, sp):
    model, ref, logits, ref_logits, others = dropout_step(group, False, sp)
    assert len(tpar.full_dropout_masks(model, group)) == 1 + 3 * DROP.n_layer
    for o in others:
        assert torch.equal(o, others[0]), "logits differ across TP ranks"
    assert_close(logits, ref_logits)
    grads_match(model, ref, "dropout")
    # attention dropout on split heads: each rank its own mask (sharded stream)
    mask = model.blocks[0].attn.attn_drop.last_mask.to(torch.uint8)
    gathered = [torch.empty_like(mask) for _ in range(2)]
    dist.all_gather(gathered, mask, group=group)
    assert not torch.equal(gathered[0], gathered[1]), "attention masks equal on both ranks"


def check_dropout_bug_detected(group):
    model, ref, logits, ref_logits, others = dropout_step(group, True, False)
    assert not torch.equal(others[0], others[1]), "the seed bug should make the ranks disagree"
    assert not torch.allclose(logits, ref_logits), "the seed bug should not match the replay"


def check_parallelize_module(ctx):
    """compose.apply_tp (the one DTensor TP plan, labs 06 and 08) against ours and unsharded."""
    from lab_utils.parallel.compose import apply_tp
    from lab_utils.topology import Topology

    dt = apply_tp(TinyGPT(CFG, seed=0), Topology(tp=ctx.world_size).build_mesh()["tp"])
    ours = tpar.tensor_parallelize(TinyGPT(CFG, seed=0), ctx.group)
    ref = TinyGPT(CFG, seed=0)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (dt, ours, ref)]
    for step in range(3):
        idx, tgt = batch(step)
        losses = []
        for m, opt in zip((dt, ours, ref), opts):
            opt.zero_grad()
            loss = lm_loss(m(idx), tgt)
            loss.backward()
            losses.append(loss.detach())
        if step == 0:  # gradients before any update (Adam would amplify float noise later)
            grads_match(ours, ref, "ours")
            for n, p in dt.named_parameters():
                g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                assert_close(g, ref.get_parameter(n).grad, msg=lambda m: f"DTensor {n}: {m}")
        for opt in opts:
            opt.step()
        assert_close(losses[0], losses[2], msg=lambda m: f"DTensor step {step}: {m}")
        assert_close(losses[1], losses[2], msg=lambda m: f"ours step {step}: {m}")


def rng_dtensor_worker(ctx):
    results = {}
    checked(results, "dropout-tp2", check_dropout, ctx.group, False)
    checked(results, "dropout-sp-tp2", check_dropout, ctx.group, True)
    checked(results, "dropout-bug-tp2", check_dropout_bug_detected, ctx.group)
    checked(results, "parallelize-module", check_parallelize_module, ctx)
    return results


@pytest.fixture(scope="module")
def equivalence():
    return run(equivalence_worker, 4, timeout_s=300, quiet=True)


@pytest.fixture(scope="module")
def rng_dtensor():
    return run(rng_dtensor_worker, 2, timeout_s=300, quiet=True)


EQ_NAMES = [
    f"{n}-tp{t}"
    for t in (2, 4)
    for n in [
        "linears",
        "mlp-sp0",
        "mlp-sp1",
        "attn-sp0",
        "attn-sp1",
        "vocab-ce",
        "gpt-sp0-vocab0",
        "gpt-sp1-vocab0",
        "gpt-sp0-vocab1",
        "gpt-sp1-vocab1",
        "comm-sp0",
        "comm-sp1",
    ]
] + ["rejects-tp4"]


@pytest.mark.parametrize("name", EQ_NAMES)
def test_equivalence_and_comm(equivalence, name):
    for rank, res in enumerate(equivalence):
        assert res[name] == "ok", f"rank {rank}: {res[name]}"


@pytest.mark.parametrize(
    "name", ["dropout-tp2", "dropout-sp-tp2", "dropout-bug-tp2", "parallelize-module"]
)
def test_rng_dtensor_link(rng_dtensor, name):
    for rank, res in enumerate(rng_dtensor):
        assert res[name] == "ok", f"rank {rank}: {res[name]}"


def test_tp_random_streams_are_independent_and_restore_the_default():
    torch.manual_seed(0)
    before = torch.get_rng_state()
    a, b = tpar.TPRandom(1, tp_rank=0), tpar.TPRandom(1, tp_rank=1)
    assert torch.equal(torch.get_rng_state(), before)  # building a stream leaves torch's alone
    with a.fork():
        ra = torch.rand(4)
    with b.fork():
        rb = torch.rand(4)
    assert not torch.equal(ra, rb)
    assert torch.equal(torch.get_rng_state(), before)
    with a.fork():  # the stream continues where it stopped
        ra2 = torch.rand(4)
    assert not torch.equal(ra, ra2)
