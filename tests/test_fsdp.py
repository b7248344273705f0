"""FSDP from scratch (lab_utils.parallel.fsdp) against one process, torch's fully_shard and the
calculators; the lab 05 experiments; bad input; the practitioner's train_fsdp2.py script.

One launch per world size (2 and 4) runs the rank-side experiments; the tests assert on what
they return. Tolerances: fp32 losses within 1e-6 relative of one process that splits the
global batch as the ranks do (grad_accum = K: the same sums in the same float order up to the
reduce-scatter's), and of one process on the whole batch; bf16 and fp16 against one process doing
FSDP's casts (mixed_precision_reference) within the same 1e-6: the casts are the same ops and the
fp32 reduction of K = 2 or 4 values can differ at most in its last bit (measured: equal). Against
fp32 training they differ by 1e-4 to 1e-2 (checked, so the comparison can fail).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.testing import assert_close

from lab_utils import run
from lab_utils.data import regression_batches, shard_for_rank, token_batches
from lab_utils.experiments import lab05
from lab_utils.experiments.lab05 import practice as lab05_practice
from lab_utils.measure import CommLedger, WireMeter, model_state_bytes
from lab_utils.models import GPTConfig, TinyGPT, ToyMLP, count_params
from lab_utils.parallel.fsdp import FSDP, MixedPrecision, clip_grad_norm_
from lab_utils.parallel.zero import ZeroOptimizer
from lab_utils.reference import default_loss, make_optimizer, reference_run

CFG = GPTConfig()  # every dim divisible by 4: no padding at K = 2 or 4
STEPS, BATCH = 5, 8
ROOT = Path(__file__).resolve().parents[1]
PRELOAD = ("torch._dynamo", "torch.distributed.fsdp")


def gpt(cfg=CFG):
    return TinyGPT(cfg, seed=0)


def odd_mlp():  # 5 -> 7 -> 7 -> 3: rows of 7 and 3 need padding at K = 4 (and 7 at K = 2)
    return ToyMLP(d_in=5, d_hidden=7, d_out=3, n_layers=3, seed=0)


class WithBuffer(nn.Module):
    """A ToyMLP whose output is scaled by a fixed buffer (not a parameter)."""

    def __init__(self):
        super().__init__()
        self.mlp = odd_mlp()
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 3))

    def forward(self, x):
        return self.mlp(x) * self.scale


def gpt_batches(steps=STEPS):
    return token_batches(steps, BATCH, CFG.seq_len, CFG.vocab_size, seed=1)


def mlp_batches(steps=STEPS):
    return regression_batches(steps, BATCH, d_in=5, d_out=3, seed=2)


def train(ctx, model, opt, batches, ledger_last=False):
    """Global mean loss per step; the ledger summary of the last step if asked (its wire
    bytes in summary["wire"])."""
    losses, summary = [], None
    for i, batch in enumerate(batches):
        x, y = shard_for_rank(batch, ctx.rank, ctx.world_size)
        ledger, wire = CommLedger(), WireMeter(ctx)
        measure = ledger_last and i == len(batches) - 1
        with ledger if measure else _null(), wire if measure else _null():
            loss = default_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
        summary = {**ledger.summary(), "wire": wire.sent if measure else None}
    t = torch.tensor(losses, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.AVG, group=ctx.group)
    return t.tolist(), summary


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _records(summary):
    return sorted((r["op"], r["tensor_bytes"]) for r in summary["records"])


def experiments(ctx):
    g, out = ctx.group, {}
    for opt_name in ("adamw", "sgd"):  # any optimizer over the shards
        fsdp = FSDP(gpt(), g)
        opt = make_optimizer(fsdp.parameters(), opt_name, 1e-2)
        out[("gpt", opt_name)] = train(ctx, fsdp, opt, gpt_batches())[0]
        out[("weights", opt_name)] = fsdp.full_state_dict()
    out["shard_shapes"] = [tuple(p.shape) for p in fsdp.parameters()]
    out["n_shards"] = len(list(fsdp.parameters()))
    # the same collectives as fully_shard, per policy (last step of 2)
    for name in (
        "FSDP",
        "FSDP keep",
        "FSDP bf16",
        "fully_shard",
        "fully_shard keep",
        "fully_shard bf16",
        "fully_shard root resharded",
    ):
        model, opt, *_ = lab05.build(name, CFG, g)
        losses, summary = train(ctx, model, opt, gpt_batches(2), ledger_last=True)
        out[("calls", name)] = (_records(summary), losses, summary["wire"])
    # uneven shapes (padding) against fully_shard: values and bytes
    for how in ("ours", "torch"):
        model = odd_mlp()
        if how == "ours":
            model = FSDP(model, g)
        else:
            from torch.distributed.fsdp import fully_shard

            for layer in (m for m in model.net if isinstance(m, nn.Linear)):
                fully_shard(layer)
            fully_shard(model)
        opt = make_optimizer(model.parameters(), "sgd", 0.1)
        losses, summary = train(ctx, model, opt, mlp_batches(), ledger_last=True)
        out[("odd", how)] = (losses, _records(summary))
        if how == "ours":
            out["odd_weights"] = model.full_state_dict()
            out["odd_memory"] = model_state_bytes(model, opt)
    # mixed precision against one process doing the same casts
    for dtype in (torch.bfloat16, torch.float16):
        fsdp = FSDP(gpt(), g, mp=MixedPrecision(dtype, torch.float32))
        opt = make_optimizer(fsdp.parameters(), "adamw", 1e-2)
        out[("mp", dtype)] = train(ctx, fsdp, opt, gpt_batches())[0]
    # tied weights, frozen parameters (a frozen unit, a unit half frozen), buffers
    tied = FSDP(TinyGPT(GPTConfig(tie_weights=True), seed=0), g)
    opt = make_optimizer(tied.parameters(), "sgd", 1e-2)
    out["tied"] = (train(ctx, tied, opt, gpt_batches())[0], tied.full_state_dict())
    frozen = ToyMLP(d_in=5, d_hidden=7, d_out=3, n_layers=3, seed=0, freeze_first=True)
    fsdp = FSDP(frozen, g)
    opt = make_optimizer([p for p in fsdp.parameters() if p.requires_grad], "sgd", 0.1)
    out["frozen_unit"] = (train(ctx, fsdp, opt, mlp_batches())[0], fsdp.full_state_dict())
    half = gpt()
    half.blocks[0].ln1.requires_grad_(False)
    half.blocks[1].attn.q.requires_grad_(False)
    fsdp = FSDP(half, g)
    opt = make_optimizer([p for p in fsdp.parameters() if p.requires_grad], "sgd", 1e-2)
    out["frozen_half"] = (train(ctx, fsdp, opt, gpt_batches())[0], fsdp.full_state_dict())
    fsdp = FSDP(WithBuffer(), g)
    opt = make_optimizer(fsdp.parameters(), "sgd", 0.1)
    out["buffer"] = (train(ctx, fsdp, opt, mlp_batches())[0], fsdp.full_state_dict())
    # gradient clipping by the global norm (one step's gradients)
    fsdp = FSDP(gpt(), g)
    x, y = shard_for_rank(gpt_batches(1)[0], ctx.rank, ctx.world_size)
    default_loss(fsdp(x), y).backward()
    with CommLedger() as ledger:
        norm = clip_grad_norm_(fsdp.parameters(), 0.5, g)
    clipped = torch.cat([p.grad for p in fsdp.parameters()]).pow(2).sum()
    dist.all_reduce(clipped, group=g)
    out["clip"] = (norm.item(), clipped.sqrt().item(), ledger.count("all_reduce"))
    # gradient accumulation: ours and fully_shard, sync off on all but the last micro-batch
    out["accum"] = lab05_practice.accumulation_traffic(
        ctx, CFG, 2, BATCH * 2, ("fully_shard", "fully_shard, sync off", "FSDP, sync off")
    )
    fsdp = FSDP(gpt(), g)  # sync on every micro-batch: the same weights as sync off
    opt = make_optimizer(fsdp.parameters(), "adamw", 1e-2)
    batch = shard_for_rank(
        token_batches(1, BATCH * 2, CFG.seq_len, CFG.vocab_size, seed=1)[0],
        ctx.rank,
        ctx.world_size,
    )
    for x, y in zip(*(t.chunk(2) for t in batch)):
        (default_loss(fsdp(x), y) / 2).backward()
    opt.step()
    out["accum_sync"] = float(sum(w.double().sum() for w in fsdp.full_state_dict().values()))
    out["replicated"] = _replicated_small_params(ctx)
    # bad input: a clear message on every rank, never a hang
    out["errors"] = _bad_inputs(g)
    return out


def _small(name, p):  # what is not worth sharding: norm weights and biases (1-D)
    return p.ndim == 1


def _replicated_small_params(ctx):
    """FSDP(replicate=) vs fully_shard(ignored_params=) plus the all-reduce torch leaves to us."""
    from torch.distributed.fsdp import fully_shard

    g, out = ctx.group, {}
    fsdp = FSDP(gpt(), g, replicate=_small)
    opt = make_optimizer(fsdp.parameters(), "adamw", 1e-2)
    out["ours"] = train(ctx, fsdp, opt, gpt_batches())[0]
    out["weights"] = fsdp.full_state_dict()
    out["kept"] = {n: p.detach().clone() for n, p in fsdp.replicated.items()}
    out["shapes"] = sorted(tuple(p.shape) for p in fsdp.parameters())
    model = gpt()
    ignored = [p for n, p in model.named_parameters() if _small(n, p)]  # a list: the same
    for block in model.blocks:  # order on every rank
        fully_shard(block, ignored_params=set(ignored))
    fully_shard(model, ignored_params=set(ignored))
    opt, losses = make_optimizer(model.parameters(), "adamw", 1e-2), []
    for batch in gpt_batches():
        x, y = shard_for_rank(batch, ctx.rank, ctx.world_size)
        loss = default_loss(model(x), y)
        loss.backward()
        for p in ignored:  # torch neither shards nor reduces ignored parameters
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=g)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    t = torch.tensor(losses, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.AVG, group=g)
    out["torch"] = t.tolist()
    fsdp = FSDP(gpt(), g, replicate=_small)  # the global norm counts a replicated grad once
    x, y = shard_for_rank(gpt_batches(1)[0], ctx.rank, ctx.world_size)
    with CommLedger() as ledger:
        default_loss(fsdp(x), y).backward()
    out["all_reduces"] = ledger.count("all_reduce")
    out["norm"] = clip_grad_norm_(fsdp.parameters(), 1e9, g, fsdp.replicated.values()).item()
    return out


def _bad_inputs(g):
    errors = {}

    def attempt(name, fn):
        try:
            fn()
            errors[name] = None
        except (ValueError, TypeError) as exc:
            errors[name] = str(exc)

    model = gpt()
    FSDP(model, g)
    attempt("twice", lambda: FSDP(model, g))
    attempt("wrapper twice", lambda: FSDP(FSDP(gpt(), g), g))
    attempt("policy matches nothing", lambda: FSDP(gpt(), g, policy=nn.Conv2d))
    attempt("policy not a policy", lambda: FSDP(gpt(), g, policy=42))
    mixed = gpt()
    mixed.head.double()
    attempt("dtypes", lambda: FSDP(mixed, g))
    meta = gpt()
    meta.head.weight = nn.Parameter(torch.empty(CFG.vocab_size, CFG.d_model, device="meta"))
    attempt("devices", lambda: FSDP(meta, g))
    tied = gpt()
    tied.blocks[1].mlp.fc.weight = tied.blocks[0].mlp.fc.weight
    attempt("tied across units", lambda: FSDP(tied, g))
    attempt("zero stage 3", lambda: ZeroOptimizer(gpt(), 3, g))
    from torch.distributed.fsdp import fully_shard

    attempt("already fully_shard", lambda: FSDP(fully_shard(gpt()), g))
    attempt("replicate unknown", lambda: FSDP(gpt(), g, replicate=["blocks.0.nope"]))
    attempt(
        "replicate + mixed precision",
        lambda: FSDP(gpt(), g, replicate=_small, mp=MixedPrecision(torch.bfloat16)),
    )
    return errors


@pytest.fixture(scope="module", params=[2, 4], ids=["K2", "K4"])
def results(request):
    k = request.param
    return k, run(experiments, k, timeout_s=400, quiet=True, preload=PRELOAD)


def rel(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


@pytest.mark.parametrize("opt", ["adamw", "sgd"])
def test_fp32_losses_equal_one_process(results, opt):
    k, per_rank = results
    got = per_rank[0][("gpt", opt)]
    same_split = reference_run(gpt, gpt_batches(), STEPS, lr=1e-2, optimizer=opt, grad_accum=k)
    assert rel(got, same_split.losses) < 1e-6
    whole = reference_run(gpt, gpt_batches(), STEPS, lr=1e-2, optimizer=opt)  # one big batch
    assert rel(got, whole.losses) < 1e-6
    if opt == "sgd":
        for name, w in same_split.state_dict.items():
            assert_close(per_rank[k - 1][("weights", opt)][name], w, rtol=1e-5, atol=1e-6)


def test_parameters_are_the_shards(results):
    k, per_rank = results
    model = gpt()
    assert per_rank[0]["n_shards"] == len(list(model.parameters()))
    want = [(-(-p.shape[0] // k) * (p.numel() // p.shape[0]),) for p in model.parameters()]
    assert sorted(per_rank[0]["shard_shapes"]) == sorted(want)


def test_small_parameters_stay_replicated_and_match_fully_shard_ignored(results):
    """Norm weights and biases kept whole on every rank, gradients averaged by ONE all-reduce:
    the same losses as one process and as fully_shard(ignored_params=...) + that all-reduce,
    and every rank ends with the same replicated values."""
    k, per_rank = results
    r0 = per_rank[0]["replicated"]
    ref = reference_run(gpt, gpt_batches(), STEPS, lr=1e-2, optimizer="adamw")
    assert rel(r0["ours"], ref.losses) < 1e-6 and rel(r0["ours"], r0["torch"]) < 1e-6
    model = gpt()
    small = {n for n, p in model.named_parameters() if _small(n, p)}
    assert set(r0["kept"]) == small and r0["all_reduces"] == 1
    n_big = sum(1 for n, p in model.named_parameters() if n not in small)
    assert len(r0["shapes"]) == n_big + len(small)  # shards of the big ones, the small ones whole
    for r in range(1, k):
        for name, value in per_rank[r]["replicated"]["kept"].items():
            assert torch.equal(value, r0["kept"][name]), f"rank {r}'s {name} differs from rank 0's"
    for name in small:
        assert_close(r0["weights"][name], r0["kept"][name])
    x, y = gpt_batches(1)[0]
    default_loss(model(x), y).backward()
    want = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).norm().item()
    assert abs(r0["norm"] - want) < 1e-5 * want


def test_comparison_can_fail(results):
    k, per_rank = results
    adam = reference_run(gpt, gpt_batches(), STEPS, lr=1e-2, optimizer="adamw").losses
    assert rel(per_rank[0][("gpt", "sgd")], adam) > 1e-3


@pytest.mark.parametrize(
    "ours, torch_name",
    [("FSDP", "fully_shard"), ("FSDP keep", "fully_shard keep"), ("FSDP bf16", "fully_shard bf16")],
)
def test_same_collectives_as_fully_shard(results, ours, torch_name):
    """Same number, kind and size of collectives for the same unit policy, same losses."""
    k, per_rank = results
    mine, theirs = per_rank[0][("calls", ours)], per_rank[0][("calls", torch_name)]
    assert mine[0] == theirs[0]
    assert rel(mine[1], theirs[1]) < 1e-6
    assert abs(mine[2] - theirs[2]) <= 0.01 * theirs[2]  # wire: the kernel's count, headers too
    n_gather = sum(op == "all_gather" for op, _ in mine[0])
    blocks = CFG.n_layer
    assert n_gather == (blocks + 1 if "keep" in ours else 2 * blocks + 1)


def test_root_resharded_costs_one_more_gather_of_the_root(results):
    k, per_rank = results
    default, resharded = (
        per_rank[0][("calls", n)][0] for n in ("fully_shard", "fully_shard root resharded")
    )
    extra = list(resharded)
    for call in default:
        extra.remove(call)
    n_block = sum(p.numel() for p in gpt().blocks[0].parameters())
    n_root = count_params(gpt()) - CFG.n_layer * n_block
    assert extra == [("all_gather", 4 * n_root)]


def test_padding_matches_fully_shard(results):
    k, per_rank = results
    (mine, my_calls), (theirs, their_calls) = (per_rank[0][("odd", h)] for h in ("ours", "torch"))
    assert my_calls == their_calls  # fully_shard pads dim 0 to a multiple of K: so do we
    ref = reference_run(odd_mlp, mlp_batches(), STEPS, lr=0.1, optimizer="sgd", grad_accum=k)
    assert rel(mine, ref.losses) < 1e-6 and rel(theirs, ref.losses) < 1e-6
    for name, w in ref.state_dict.items():
        assert_close(per_rank[k - 1]["odd_weights"][name], w, rtol=1e-5, atol=1e-6)
    rows = [p.shape[0] for p in odd_mlp().parameters()]
    padded = sum(-(-r // k) * k * (p.numel() // r) for r, p in zip(rows, odd_mlp().parameters()))
    mem = per_rank[0]["odd_memory"]
    assert mem["params"] == 4 * padded // k  # each rank: its padded rows, fp32


@pytest.mark.parametrize("dtype, tol", [(torch.bfloat16, 1e-6), (torch.float16, 1e-6)])
def test_mixed_precision_equals_one_process_doing_the_same_casts(results, dtype, tol):
    k, per_rank = results
    mp = MixedPrecision(dtype, torch.float32)
    ref = lab05.mixed_precision_reference(gpt, gpt_batches(), STEPS, k, mp)
    got = per_rank[0][("mp", dtype)]
    assert rel(got, ref) < tol
    fp32 = reference_run(gpt, gpt_batches(), STEPS, lr=1e-2).losses
    assert rel(got, fp32) > 1e-4  # it IS lower precision: the check could fail


def test_tied_frozen_and_buffers(results):
    k, per_rank = results
    tied_ref = reference_run(
        lambda: TinyGPT(GPTConfig(tie_weights=True), seed=0),
        gpt_batches(),
        STEPS,
        lr=1e-2,
        optimizer="sgd",
        grad_accum=k,
    )
    losses, weights = per_rank[0]["tied"]
    assert rel(losses, tied_ref.losses) < 1e-6
    assert torch.equal(weights["head.weight"], weights["tok_emb.weight"])
    assert_close(weights["head.weight"], tied_ref.state_dict["head.weight"], rtol=1e-5, atol=1e-6)

    def frozen_mlp():
        return ToyMLP(d_in=5, d_hidden=7, d_out=3, n_layers=3, seed=0, freeze_first=True)

    ref = reference_run(frozen_mlp, mlp_batches(), STEPS, lr=0.1, optimizer="sgd", grad_accum=k)
    losses, weights = per_rank[0]["frozen_unit"]
    assert rel(losses, ref.losses) < 1e-6
    assert torch.equal(weights["net.0.weight"], frozen_mlp().state_dict()["net.0.weight"])

    def half_frozen():
        m = gpt()
        m.blocks[0].ln1.requires_grad_(False)
        m.blocks[1].attn.q.requires_grad_(False)
        return m

    ref = reference_run(half_frozen, gpt_batches(), STEPS, lr=1e-2, optimizer="sgd", grad_accum=k)
    losses, weights = per_rank[0]["frozen_half"]
    assert rel(losses, ref.losses) < 1e-6
    frozen_q = "blocks.1.attn.q.weight"
    assert torch.equal(weights[frozen_q], gpt().state_dict()[frozen_q])
    for name, w in ref.state_dict.items():
        assert_close(weights[name], w, rtol=1e-5, atol=1e-6)

    ref = reference_run(WithBuffer, mlp_batches(), STEPS, lr=0.1, optimizer="sgd", grad_accum=k)
    losses, weights = per_rank[0]["buffer"]
    assert rel(losses, ref.losses) < 1e-6
    assert torch.equal(weights["scale"], WithBuffer().scale)


def test_clip_grad_norm_uses_the_global_norm(results):
    k, per_rank = results
    model = gpt()
    x, y = gpt_batches(1)[0]
    losses = [default_loss(model(xs), ys) / k for xs, ys in zip(x.chunk(k), y.chunk(k))]
    sum(losses).backward()
    want = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
    norm, clipped, all_reduces = per_rank[0]["clip"]
    assert norm == pytest.approx(want, rel=1e-5)
    assert clipped == pytest.approx(0.5, rel=1e-4) and all_reduces == 1


def test_gradient_accumulation_matches_fully_shard(results):
    k, per_rank = results
    acc = per_rank[0]["accum"]
    assert acc["FSDP, sync off"].calls == acc["fully_shard, sync off"].calls
    assert acc["FSDP, sync off"].ledger_bytes == acc["fully_shard, sync off"].ledger_bytes
    assert (
        acc["fully_shard"].calls["reduce_scatter"]
        == 2 * acc["fully_shard, sync off"].calls["reduce_scatter"]
    )
    sums = [acc[n].weights_checksum for n in acc] + [per_rank[0]["accum_sync"]]
    assert max(sums) - min(sums) < 1e-5 * abs(sums[0])


def test_bad_input_gives_a_clear_message(results):
    k, per_rank = results
    errors = per_rank[0]["errors"]
    expect = {
        "twice": "already wrapped",
        "wrapper twice": "already wrapped",
        "policy matches nothing": "matched no submodule",
        "policy not a policy": "policy must be",
        "dtypes": "different dtypes",
        "devices": "different devices",
        "tied across units": "tied weights",
        "zero stage 3": "FSDP",
        "already fully_shard": "DTensor",
        "replicate unknown": "not parameters of",
        "replicate + mixed precision": "use one or the other",
    }
    for case, words in expect.items():
        assert errors[case] is not None and words in errors[case], (case, errors[case])


# ---- the practitioner's script, launched as a user would ----------------------------------------
def test_train_fsdp2_script_with_torchrun(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(ROOT / "scripts" / "train_fsdp2.py"),
        "--steps",
        "3",
        "--out",
        str(tmp_path),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (tmp_path / "checkpoint" / ".metadata").exists()
    assert "resumed" in done.stdout
