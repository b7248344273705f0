"""ZeRO stages 0-2 (lab_utils.parallel.zero) against the single-process reference, torch's
fully_shard
(FSDP2), the memory calculator and the communication calculator.

One launch per world size (2 and 4) runs every experiment: TinyGPT with AdamW and SGD at every
stage, ZeRO-3 without resharding after forward, fully_shard, a ToyMLP whose units need padding,
and every stage on a ONE-rank subgroup (ZeRO must degrade to plain training).
"""

import pytest
import torch
import torch.distributed as dist
from torch.testing import assert_close

from lab_utils import run
from lab_utils.calc import RECIPES, Recipe, dp_bytes_per_rank, model_state_memory
from lab_utils.data import regression_batches, shard_for_rank, token_batches
from lab_utils.measure import CommLedger, model_state_bytes
from lab_utils.models import GPTConfig, TinyGPT, ToyMLP, count_params
from lab_utils.parallel.zero import ZeroOptimizer
from lab_utils.reference import default_loss, make_optimizer, reference_run

CFG = GPTConfig()  # every unit's size is divisible by 4: no padding at K = 2 or 4
STEPS, GLOBAL_BATCH = 4, 8
STAGES = (0, 1, 2)
STRATEGY = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}


def gpt():
    return TinyGPT(CFG, seed=0)


def odd_mlp():  # units of 5*7+7=42, 56 and 24 parameters: 42 needs 2 elements of padding at K=4
    return ToyMLP(d_in=5, d_hidden=7, d_out=3, n_layers=3, seed=0)


def gpt_batches():
    return token_batches(STEPS, GLOBAL_BATCH, CFG.seq_len, CFG.vocab_size, seed=1)


def mlp_batches():
    return regression_batches(STEPS, GLOBAL_BATCH, d_in=5, d_out=3, seed=2)


def train(ctx, model, step_obj, batches, zero_grad, group_rank, group_size, group):
    """STEPS steps; returns the global mean losses and the ledger summary of the last step."""
    losses, summary = [], None
    for i in range(STEPS):
        x, y = shard_for_rank(batches[i], group_rank, group_size)
        with CommLedger() as ledger:
            zero_grad()
            loss = default_loss(model(x), y)
            loss.backward()
            step_obj.step()
        summary = ledger.summary()
        t = torch.tensor([loss.item()])
        dist.all_reduce(t, group=group)
        losses.append(t.item() / group_size)
    return losses, summary


def experiments(ctx):
    from torch.distributed.fsdp import fully_shard

    out = {}
    k, r, g = ctx.world_size, ctx.rank, ctx.group
    for opt in ("adamw", "sgd"):
        for stage in STAGES:
            model = gpt()
            zero = ZeroOptimizer(model, stage, g, optimizer=opt, lr=1e-2)
            losses, comm = train(ctx, model, zero, gpt_batches(), zero.zero_grad, r, k, g)
            out[("gpt", opt, stage)] = dict(
                losses=losses,
                comm=comm,
                mem=zero.state_bytes(),
                generic=model_state_bytes(model, zero.optimizer)["total"],
                weights=zero.full_state_dict(),
            )
    model = gpt()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    opt = make_optimizer(model.parameters(), "adamw", 1e-2)
    losses, comm = train(ctx, model, opt, gpt_batches(), lambda: opt.zero_grad(False), r, k, g)
    out["fsdp2"] = dict(losses=losses, comm=comm, mem=model_state_bytes(model, opt))
    for stage in (1, 2):
        model = odd_mlp()
        zero = ZeroOptimizer(model, stage, g, optimizer="sgd", lr=0.1)
        losses, _ = train(ctx, model, zero, mlp_batches(), zero.zero_grad, r, k, g)
        out[("mlp", stage)] = dict(
            losses=losses, mem=zero.state_bytes(), weights=zero.full_state_dict()
        )
    # One rank alone: a subgroup per rank (every rank must create every group).
    singles = [dist.new_group([i]) for i in range(k)]
    for stage in STAGES:
        model = gpt()
        zero = ZeroOptimizer(model, stage, singles[r], optimizer="adamw", lr=1e-2)
        losses, comm = train(ctx, model, zero, gpt_batches(), zero.zero_grad, 0, 1, singles[r])
        out[("single", stage)] = dict(losses=losses, bytes=comm["bytes_sent"])
    return out


@pytest.fixture(scope="module", params=[2, 4], ids=["K2", "K4"])
def results(request):
    k = request.param
    per_rank = run(experiments, k, timeout_s=240, quiet=True)
    return k, per_rank


@pytest.fixture(scope="module")
def refs():
    return {
        (name, opt): reference_run(model_fn, batches(), STEPS, lr=lr, optimizer=opt)
        for name, model_fn, batches, opt, lr in (
            ("gpt", gpt, gpt_batches, "adamw", 1e-2),
            ("gpt", gpt, gpt_batches, "sgd", 1e-2),
            ("mlp", odd_mlp, mlp_batches, "sgd", 0.1),
        )
    }


N = count_params(gpt())
FP32_ADAM = RECIPES["fp32_adam"]  # 4 B weights + 4 B grads + 8 B Adam (m, v) per parameter
FP32_SGD = Recipe("fp32_sgd", 4, 4, 0, 0, "plain SGD: no optimizer state")


@pytest.mark.parametrize("opt", ["adamw", "sgd"])
@pytest.mark.parametrize("stage", STAGES)
def test_losses_and_weights_match_reference(results, refs, stage, opt):
    k, per_rank = results
    ref = refs[("gpt", opt)]
    for r in range(k):
        got = per_rank[r][("gpt", opt, stage)]
        # Adam divides by sqrt(v): float noise of the gradient average is amplified, so
        # losses (not weights) are compared for AdamW; SGD weights must match closely.
        assert_close(got["losses"], ref.losses, rtol=1e-5, atol=1e-5)
        if opt == "sgd":
            for name, w in ref.state_dict.items():
                assert_close(got["weights"][name], w, rtol=1e-5, atol=1e-6, msg=name)
    w0, w1 = (per_rank[r][("gpt", opt, stage)]["weights"] for r in (0, k - 1))
    for name in w0:  # every replica holds the same model
        assert torch.equal(w0[name], w1[name]), name


def test_wrong_reference_is_detected(results, refs):
    """The comparison can fail: SGD losses differ from AdamW's after the first update."""
    k, per_rank = results
    with pytest.raises(AssertionError):
        assert_close(
            per_rank[0][("gpt", "sgd", 1)]["losses"],
            refs[("gpt", "adamw")].losses,
            rtol=1e-5,
            atol=1e-5,
        )


@pytest.mark.parametrize("stage", STAGES)
def test_memory_equals_calculator_exactly(results, stage):
    k, per_rank = results
    for r in range(k):
        mem = per_rank[r][("gpt", "adamw", stage)]["mem"]
        calc = model_state_memory(N, FP32_ADAM, zero_stage=stage, dp=k)
        assert mem["padding"] == 0 and mem["n_params"] == N
        assert (mem["params"], mem["grads"], mem["optimizer"]) == (
            calc.params,
            calc.grads,
            calc.master + calc.optimizer,
        )
        # the generic storage ledger books the buckets differently but agrees on the total
        assert per_rank[r][("gpt", "adamw", stage)]["generic"] == mem["total"] == calc.total


def test_fully_shard_memory_equals_zero3(results):
    k, per_rank = results
    mem, calc = per_rank[0]["fsdp2"]["mem"], model_state_memory(N, FP32_ADAM, 3, dp=k)
    assert (mem["params"], mem["grads"], mem["optimizer"]) == (
        calc.params,
        calc.grads,
        calc.optimizer,
    )


@pytest.mark.parametrize("stage", STAGES)
def test_bytes_per_step_equal_2x_2x_2x_3x(results, stage):
    k, per_rank = results
    comm = per_rank[0][("gpt", "adamw", stage)]["comm"]
    want = dp_bytes_per_rank(4 * N, k, STRATEGY[stage])  # fp32: 4 bytes per parameter
    assert comm["bytes_sent"] == pytest.approx(want, rel=1e-12)
    units = CFG.n_layer + 1  # one per block + the root (embeddings, final norm, head)
    counts = {op: row["count"] for op, row in comm["by_op"].items()}
    assert (
        counts
        == {
            0: {"all_reduce": units},
            1: {"reduce_scatter": units, "all_gather": units},
            2: {"reduce_scatter": units, "all_gather": units},
            3: {"reduce_scatter": units, "all_gather": 2 * units},
        }[stage]
    )


def test_fully_shard_collectives(results):
    """FSDP2 keeps the ROOT's parameters after forward (they are needed first in backward):
    one all-gather fewer than re-gathering every unit."""
    k, per_rank = results
    counts = {op: row["count"] for op, row in per_rank[0]["fsdp2"]["comm"]["by_op"].items()}
    assert counts == {"all_gather": 2 * CFG.n_layer + 1, "reduce_scatter": CFG.n_layer + 1}


@pytest.mark.parametrize("stage", [1, 2])
def test_padding_is_accounted_for(results, refs, stage):
    k, per_rank = results
    got, ref = per_rank[0][("mlp", stage)], refs[("mlp", "sgd")]
    n = count_params(odd_mlp())
    assert_close(got["losses"], ref.losses, rtol=1e-5, atol=1e-5)
    for name, w in ref.state_dict.items():
        assert_close(got["weights"][name], w, rtol=1e-5, atol=1e-6, msg=name)
    pad = got["mem"]["padding"]
    assert pad == sum(-u % k for u in (42, 56, 24))
    calc = model_state_memory(n + pad, FP32_SGD, zero_stage=stage, dp=k)
    assert (got["mem"]["params"], got["mem"]["grads"]) == (calc.params, calc.grads)


@pytest.mark.parametrize("stage", STAGES)
def test_one_rank_is_plain_training(results, refs, stage):
    k, per_rank = results
    for r in range(k):  # each rank trained alone on the GLOBAL batch
        got = per_rank[r][("single", stage)]
        assert_close(got["losses"], refs[("gpt", "adamw")].losses, rtol=1e-6, atol=1e-6)
        assert got["bytes"] == 0
