"""Bugs in WHAT is averaged: the loss over tokens, micro-batches and ranks (lab 14).

token_weighted   Each rank takes the mean over ITS micro-batch's real tokens, then the
                 micro-batches and ranks are averaged: with padded, uneven rows a token in a
                 short row weighs more than one in a long row. The reference (and the fix):
                 every real token weighs 1 / (real tokens in the GLOBAL batch), one all-reduce
                 of the token count, gradients SUMMED (torchtitan PR#2206: "per-rank /
                 per-microbatch normalization ... caused incorrect gradient weighting";
                 torchtune PR#1875 for accumulation on one device).
accum_undivided  Gradient accumulation over K micro-batches without dividing each micro-loss by
                 K: the loss and every gradient are K times the reference's (the effective
                 learning rate is K times too big; nanoGPT PR#207 for the logged value).
moe_aux_per_rank The MoE load-balancing loss E * sum_e f_e P_e computed on each rank's tokens
                 and averaged over ranks, where the reference computes f (the share of tokens
                 per expert) and P (the mean router probability) over the GLOBAL batch (Qiu et
                 al. 2025, "Demons in the Detail", arXiv:2501.11873: global-batch balancing).
                 The fix all-reduces the expert counts (no gradient) and keeps each rank's
                 probability sums as its term of a Partial sum.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils.correctness.case import Case, RankEnv
from lab_utils.correctness.layout import Layout, Partial, Shard, replicated
from lab_utils.correctness.recorder import Recorder
from lab_utils.correctness.zoo.model import PAD, batch, make_model, reduction_size, rows_of
from lab_utils.models import lm_loss
from lab_utils.parallel.collectives import all_reduce_flat
from lab_utils.parallel.expert_parallel import load_balancing_loss, make_router

WORLD, ACCUM = 4, 2
DP = tuple(range(WORLD))
PAD_SEED = 2  # which rows are padded how much (model.batch)


def accum_reference(rec: Recorder, padded: bool) -> None:
    model = make_model(torch.float64)
    rec.watch(model)
    x, y = batch(pad_seed=PAD_SEED if padded else None)
    loss = lm_loss(model(x), y)  # the mean over every real token of the global batch
    rec.loss(loss)
    loss.backward()
    rec.grads(model)


def accum_step(env: RankEnv, rec: Recorder, padded: bool, how: str) -> None:
    """DP over 4 ranks x 2 micro-batches. how: "token_mean" (per micro-batch means, AVG),
    "global_tokens" (sum / global token count, SUM), "undivided" / "divided" (by K)."""
    model = make_model()
    rec.watch(model, Layout(DP, (Shard(0),)))
    x, y = batch(pad_seed=PAD_SEED if padded else None)
    x, y = rows_of(x, env.rank, WORLD), rows_of(y, env.rank, WORLD)
    summed = how == "global_tokens"
    if summed:
        n_tokens = (y != PAD).sum()
        dist.all_reduce(n_tokens)  # real tokens in the GLOBAL batch: one 8-byte all-reduce
    for xm, ym in zip(x.chunk(ACCUM), y.chunk(ACCUM)):
        logits = model(xm)
        if summed:
            loss = F.cross_entropy(logits.flatten(0, 1), ym.flatten(), reduction="sum") / n_tokens
        else:
            loss = lm_loss(logits, ym) / (1 if how == "undivided" else ACCUM)
        rec.loss(loss, Layout(DP, (Partial("sum" if summed else "avg"),)))
        loss.backward()  # .grad accumulates over the micro-batches
    op = dist.ReduceOp.SUM if summed else dist.ReduceOp.AVG
    all_reduce_flat([p.grad for p in model.parameters()], op)
    rec.grads(model, replicated(DP))


E, TOP_K, TOKENS = 4, 2, 32  # experts, experts per token, tokens in the global batch


def router_tokens() -> torch.Tensor:
    """(TOKENS, WIDTH) hidden states; each rank's quarter is shifted so that ranks route
    differently (per-rank balance then differs from the global one)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(TOKENS, 8, generator=g)
    return x + torch.arange(WORLD).repeat_interleave(TOKENS // WORLD)[:, None] * 0.5


def moe_reference(rec: Recorder) -> None:
    router = make_router(8, E).double()
    rec.watch(router, prefix="router.")
    probs = torch.softmax(router(router_tokens().double()), -1)
    aux = load_balancing_loss(probs, probs.topk(TOP_K, -1).indices)
    rec.value("load_balancing_loss", aux)
    aux.backward()
    rec.grads(router, prefix="router.")


def moe_step(env: RankEnv, rec: Recorder, global_batch: bool) -> None:
    router = make_router(8, E)
    rec.watch(router, Layout(DP, (Shard(0),)), prefix="router.")
    probs = torch.softmax(router(rows_of(router_tokens(), env.rank, WORLD)), -1)  # (T/N, E)
    idx = probs.topk(TOP_K, -1).indices
    if global_batch:
        counts = torch.bincount(idx.reshape(-1), minlength=E).float()
        dist.all_reduce(counts)  # f over the global batch: E floats, no gradient
        f = counts / (TOKENS * TOP_K)
        aux = E * (f * probs.sum(0) / TOKENS).sum()  # my term of the global E sum f P
        layout, op = Layout(DP, (Partial("sum"),)), dist.ReduceOp.SUM
    else:
        aux = load_balancing_loss(probs, idx)  # balance of MY tokens only
        layout, op = Layout(DP, (Partial("avg"),)), dist.ReduceOp.AVG
    rec.value("load_balancing_loss", aux, layout)
    aux.backward()
    all_reduce_flat([p.grad for p in router.parameters()], op)
    rec.grads(router, replicated(DP), prefix="router.")


def cases() -> list[tuple[str, str, str, Case, Case]]:
    n = reduction_size(WORLD)
    token = partial(Case, world_size=WORLD, reduction_size=n,
                    reference=partial(accum_reference, padded=True))
    plain = partial(Case, world_size=WORLD, reduction_size=n,
                    reference=partial(accum_reference, padded=False))
    moe = partial(Case, world_size=WORLD, reduction_size=TOKENS + 8, reference=moe_reference)
    return [
        ("token_weighted", "pytorch/torchtitan#2206, meta-pytorch/torchtune#1875", "loss",
         token(name="token_weighted", step=partial(accum_step, padded=True, how="token_mean")),
         token(name="token_weighted (fixed)",
               step=partial(accum_step, padded=True, how="global_tokens"))),
        ("accum_undivided", "karpathy/nanoGPT#207", "loss",
         plain(name="accum_undivided", step=partial(accum_step, padded=False, how="undivided")),
         plain(name="accum_undivided (fixed)",
               step=partial(accum_step, padded=False, how="divided"))),
        ("moe_aux_per_rank", "arXiv:2501.11873 (Qiu et al. 2025)", "value load_balancing_loss",
         moe(name="moe_aux_per_rank", step=partial(moe_step, global_batch=False)),
         moe(name="moe_aux_per_rank (fixed)", step=partial(moe_step, global_batch=True))),
    ]
