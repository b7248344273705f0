"""Lab 02's experiments and exercise, in this process: autocast dtypes, selective
recomputation measured against the score-tensor formula, warmup, the loss-scaler grader."""

import torch

from lab_utils.exercises import loss_scaler as ls
from lab_utils.experiments import lab02
from lab_utils.experiments.lab02 import memory as mem
from lab_utils.models import GPTConfig, TinyGPT


def test_autocast_table_on_cpu():
    cfg = GPTConfig()
    x = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len))
    rows = {r["op"]: r for r in lab02.autocast_table(lambda: TinyGPT(cfg), x, x)}
    auto, hand = "autocast(bf16)", "model.to(bf16) by hand"
    assert rows["linear (q, k, v, proj, fc)"][auto] == "bfloat16"
    assert rows["layer_norm"][auto] == "float32" and rows["layer_norm"][hand] == "bfloat16"
    assert rows["loss: log_softmax"][auto] == "float32"
    assert rows["parameters"][auto] == rows["gradients"][auto] == "float32"
    assert rows["gradients"][hand] == "bfloat16"


def test_forward_overflow_is_out_of_loss_scaling_reach():
    for s in (1.0, 2.0**-16):
        assert lab02.attention_logits(torch.float16, loss_scale=s)["inf logits"] > 0
    assert lab02.attention_logits(torch.bfloat16)["inf logits"] == 0


def test_selective_recompute_drops_exactly_the_score_tensors():
    cfg = GPTConfig(n_layer=2, d_model=32, n_head=4, seq_len=32)
    model = TinyGPT(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len))
    runs = mem.selective_sweep(model, idx, idx)
    score = 4 * cfg.n_head * cfg.seq_len**2 * 2 * cfg.n_layer  # fp32 softmax outputs
    assert runs["none"].score_bytes == score and runs["selective"].score_bytes == 0
    assert runs["none"].after_forward - runs["selective"].after_forward == score
    assert runs["full"].after_forward < runs["selective"].after_forward


def test_warmup_starts_at_start_lr():
    seen, losses = mem.sgd_run(32, 0.08, warmup_steps=4, start_lr=0.01, samples=32 * 5)
    assert len(losses) == 5
    assert mem.min_global_batch(64) == 64 and mem.min_global_batch(64, 2, 4) == 512


def test_loss_scaler_reference_matches_gradscaler_and_wrong_ones_are_named():
    for case in ls.CASES:
        assert (
            ls._first_difference(
                ls.trajectory(ls.scaler_step, case), ls.gradscaler_trajectory(case)
            )
            is None
        )
    for name, fn in ls.WRONG.items():
        verdict = ls.check(None, fn)
        assert not verdict.passed, name
        assert " ".join(fn.__doc__.split()) in verdict.message, (name, verdict.message)


def test_loss_scaler_accepts_an_unusual_solution():
    def fused(optimizer, state):  # torch's fused unscale-and-check kernel
        grads = [p.grad for g in optimizer.param_groups for p in g["params"]]
        found = torch.zeros(1)
        torch._amp_foreach_non_finite_check_and_unscale_(
            grads, found, torch.tensor(1 / state.scale)
        )
        if found.item():
            state.scale, state.good_steps = state.scale * state.backoff_factor, 0
            return False
        if state.max_norm is not None:
            torch.nn.utils.clip_grad_norm_(
                [p for g in optimizer.param_groups for p in g["params"]], state.max_norm
            )
        optimizer.step()
        state.good_steps = (state.good_steps + 1) % state.growth_interval
        if state.good_steps == 0:
            state.scale *= state.growth_factor
        return True

    assert ls.check(None, fused).passed
