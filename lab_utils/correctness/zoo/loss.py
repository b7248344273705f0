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
                 learning rate is K times too big; nanoGPT#206 "loss.backward() without first
                 normalizing"; transformers#37197: the loss scaled up by the accumulation steps).
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


def cases() -> list[tuple[str, str, str, Case, Case]]:
    n = reduction_size(WORLD)
    token = partial(
        Case, world_size=WORLD, reduction_size=n, reference=partial(accum_reference, padded=True)
    )
    plain = partial(
        Case, world_size=WORLD, reduction_size=n, reference=partial(accum_reference, padded=False)
    )
    return [
        (
            "token_weighted",
            "pytorch/torchtitan#2206, meta-pytorch/torchtune#1875",
            "loss",
            token(name="token_weighted", step=partial(accum_step, padded=True, how="token_mean")),
            token(
                name="token_weighted (fixed)",
                step=partial(accum_step, padded=True, how="global_tokens"),
            ),
        ),
        (
            "accum_undivided",
            "karpathy/nanoGPT#206, huggingface/transformers#37197",
            "loss",
            plain(name="accum_undivided", step=partial(accum_step, padded=False, how="undivided")),
            plain(
                name="accum_undivided (fixed)",
                step=partial(accum_step, padded=False, how="divided"),
            ),
        ),
    ]
