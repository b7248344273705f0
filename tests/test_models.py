"""Models, synthetic data and the single-process reference (lab_utils.models/data/reference)."""

import pytest
import torch
from torch.testing import assert_close

from lab_utils.data import regression_batches, shard_for_rank, token_batches
from lab_utils.models import GPTConfig, TinyGPT, ToyMLP, count_params, lm_loss, split_stages
from lab_utils.reference import forward_backward, reference_losses, reference_run

CFG = GPTConfig()  # vocab 64, seq 16, 2 layers, 2 heads, d_model 32


def tokens(seed: int = 0, batch: int = 4) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(CFG.vocab_size, (batch, CFG.seq_len), generator=g)


# -- config and construction ------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(d_model=30, n_head=4), "divisible by n_head"),
        (dict(n_layer=0), "n_layer must be a positive integer"),
        (dict(dropout=1.0), "dropout"),
        (dict(d_ff=0), "d_ff must be a positive integer"),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**kwargs)


def test_same_seed_same_model_different_seed_different():
    a, b, c = TinyGPT(CFG, seed=0), TinyGPT(CFG, seed=0), TinyGPT(CFG, seed=1)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        if pa.std() > 0:  # LayerNorm weights (ones) and biases (zeros) are seed-independent
            assert not torch.equal(pa, pc), name
    idx = tokens()
    assert torch.equal(a(idx), b(idx))
    assert not torch.equal(a(idx), c(idx))


def test_init_leaves_global_rng_untouched():
    state = torch.random.get_rng_state()
    TinyGPT(CFG, seed=3)
    ToyMLP(seed=3, batchnorm=True)
    assert torch.equal(state, torch.random.get_rng_state())


def test_shapes_and_structure():
    model = TinyGPT(CFG)
    assert model(tokens(batch=3)).shape == (3, CFG.seq_len, CFG.vocab_size)  # (B, T, V)
    assert model(tokens()[:, :5]).shape == (4, 5, CFG.vocab_size)  # shorter T is fine
    attn = model.blocks[0].attn
    assert [type(m).__name__ for m in (attn.q, attn.k, attn.v, attn.proj)] == ["Linear"] * 4
    assert model.blocks[0].mlp.fc.out_features == 4 * CFG.d_model
    with pytest.raises(ValueError, match="exceeds GPTConfig.seq_len"):
        model(torch.zeros(1, CFG.seq_len + 1, dtype=torch.long))


def test_attention_reads_head_count_from_tensors():
    # What column-parallel TP does to one rank: q/k/v keep only the first head's output
    # channels, proj only the matching input channels. The block must still run and produce
    # this head's partial sum of the full output (RowwiseParallel all-reduces the partials).
    cfg = GPTConfig(n_head=2, d_model=32, bias=False)
    attn = TinyGPT(cfg).blocks[0].attn
    x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(0))
    full = attn(x)
    partial = torch.zeros_like(full)
    for h in range(2):
        cols = slice(h * cfg.head_dim, (h + 1) * cfg.head_dim)
        shard = TinyGPT(cfg).blocks[0].attn
        for name in ("q", "k", "v"):
            getattr(shard, name).weight = torch.nn.Parameter(getattr(attn, name).weight[cols])
        shard.proj.weight = torch.nn.Parameter(attn.proj.weight[:, cols])
        partial += shard(x)
    assert_close(partial, full)


def test_tied_weights_are_shared_and_counted_once():
    tied, untied = TinyGPT(GPTConfig(tie_weights=True)), TinyGPT(GPTConfig())
    assert tied.head.weight is tied.tok_emb.weight
    assert count_params(untied) - count_params(tied) == CFG.vocab_size * CFG.d_model


def test_toy_mlp_options():
    x = torch.randn(8, 16)
    assert torch.equal(ToyMLP(seed=0)(x), ToyMLP(seed=0)(x))
    assert ToyMLP(n_layers=3)(x).shape == (8, 16)
    bn = ToyMLP(batchnorm=True)
    assert any(isinstance(m, torch.nn.BatchNorm1d) for m in bn.modules())
    frozen = ToyMLP(freeze_first=True)
    assert not frozen.net[0].weight.requires_grad and frozen.net[-1].weight.requires_grad
    assert count_params(frozen, trainable_only=True) == count_params(frozen) - (16 * 32 + 32)


# -- pipeline split ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n_layer, n_stages, balance",
    [(2, 1, None), (2, 2, None), (3, 2, None), (3, 3, None), (3, 2, [0, 3])],
)
def test_split_stages_compose_to_full_forward(n_layer, n_stages, balance):
    model = TinyGPT(GPTConfig(n_layer=n_layer), seed=1)
    idx = tokens()
    x = idx
    stages = split_stages(model, n_stages, balance)
    for stage in stages:
        x = stage(x)
    assert torch.equal(x, model(idx))  # same ops in the same order: bitwise equal
    assert sum(count_params(s) for s in stages) == count_params(model)  # no parameter twice


def test_split_stages_errors():
    with pytest.raises(ValueError, match="tie_weights"):
        split_stages(TinyGPT(GPTConfig(tie_weights=True)), 2)
    with pytest.raises(ValueError, match="summing to n_layer=2"):
        split_stages(TinyGPT(CFG), 2, balance=[1, 2])
    with pytest.raises(ValueError, match="n_stages=3 > n_layer=2"):
        split_stages(TinyGPT(CFG), 3)


# -- data -------------------------------------------------------------------------------------


def test_token_batches_follow_the_rule_and_are_deterministic():
    batches = token_batches(2, 4, CFG.seq_len, CFG.vocab_size, seed=0)
    x, y = batches[0]
    assert x.shape == y.shape == (4, CFG.seq_len) and x.dtype == torch.long
    assert torch.equal(y, (5 * x + 3) % CFG.vocab_size)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    again = token_batches(2, 4, CFG.seq_len, CFG.vocab_size, seed=0)
    assert all(torch.equal(a, b) for pa, pb in zip(batches, again) for a, b in zip(pa, pb))
    assert not torch.equal(x, token_batches(1, 4, CFG.seq_len, CFG.vocab_size, seed=1)[0][0])
    xn, yn = token_batches(1, 64, CFG.seq_len, CFG.vocab_size, noise=0.5)[0]
    assert 0.3 < (yn != (5 * xn + 3) % CFG.vocab_size).float().mean() < 0.7


def test_shard_for_rank_tiles_the_global_batch():
    x, y = regression_batches(1, 8)[0]
    shards = [shard_for_rank((x, y), r, 4) for r in range(4)]
    assert torch.equal(torch.cat([s[0] for s in shards]), x)
    assert torch.equal(torch.cat([s[1] for s in shards]), y)
    assert torch.equal(shard_for_rank(x, 1, 2), x[4:])
    with pytest.raises(ValueError, match="evenly"):
        shard_for_rank(x, 0, 3)


# -- reference training -----------------------------------------------------------------------


def test_loss_decreases_on_synthetic_tokens():
    batches = token_batches(4, 8, CFG.seq_len, CFG.vocab_size)
    losses = reference_losses(lambda: TinyGPT(CFG), batches, steps=30, lr=1e-2)
    assert abs(losses[0] - torch.log(torch.tensor(64.0)).item()) < 0.1  # starts near chance
    assert losses[-1] < 0.5 * losses[0]


def test_toy_mlp_loss_decreases_with_sgd():
    # MSE averages over B * d_out numbers, so gradients are small and plain SGD wants a big lr.
    batches = regression_batches(4, 16)
    losses = reference_losses(lambda: ToyMLP(), batches, steps=30, lr=1.0, optimizer="sgd")
    assert losses[-1] < 0.6 * losses[0]


def test_reference_is_bitwise_deterministic_even_with_dropout():
    batches = token_batches(2, 4, CFG.seq_len, CFG.vocab_size)
    make = lambda: TinyGPT(GPTConfig(dropout=0.1))  # noqa: E731
    a = reference_run(make, batches, steps=5)
    b = reference_run(make, batches, steps=5)
    assert a.losses == b.losses
    assert all(torch.equal(a.state_dict[k], b.state_dict[k]) for k in a.state_dict)


def test_grad_accum_matches_full_batch_gradient():
    batch = token_batches(1, 8, CFG.seq_len, CFG.vocab_size)[0]
    full, accum = TinyGPT(CFG), TinyGPT(CFG)
    loss_full = forward_backward(full, batch, lm_loss)
    loss_accum = forward_backward(accum, batch, lm_loss, grad_accum=4)
    assert loss_full == pytest.approx(loss_accum, rel=1e-5)
    for p, q in zip(full.parameters(), accum.parameters()):
        assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
