"""Bugs where pipeline parallelism meets data parallelism (lab 14).

pp=2 x dp=2, rank = 2 stage + dp: stage 0 (emb, fc1, act) on ranks 0, 1, stage 1 (fc2, drop,
head) on ranks 2, 3; the course's StageWorker runs GPipe over 2 micro-batches per DP rank.

pp_missing_dp_sync  the DP all-reduce is done on stage 0 but forgotten on stage 1: each of
                    stage 1's replicas keeps the gradient of its own half of the batch (picotron
                    PR#3 "disable grad sync in pp" and PR#5 reworked the data x pipeline
                    gradient sync).
pp_tied_embeddings  emb.weight and head.weight are ONE parameter in the reference, but stage 0
                    holds the embedding and stage 1 the head: each stage's copy gets only its own
                    use's gradient unless the two copies are all-reduced over the "embedding
                    group" (stage 0 and the last stage, same dp index), as Megatron-LM's
                    _allreduce_word_embedding_grads does (NVIDIA/Megatron-LM, finalize_model_grads).
"""

from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.correctness.case import Case, RankEnv
from lab_utils.correctness.layout import Layout, Partial, Replicate, Shard, replicated
from lab_utils.correctness.recorder import Recorder
from lab_utils.correctness.zoo.model import SEQ, WIDTH, batch, make_model, reduction_size, rows_of
from lab_utils.models import lm_loss
from lab_utils.parallel.collectives import all_reduce_flat
from lab_utils.parallel.pipeline_parallel.schedules import gpipe
from lab_utils.parallel.pipeline_parallel.stage import StageWorker

WORLD, MICRO = 4, 2
STAGES = ((0, 1), (2, 3))  # stage -> its dp ranks
EMBEDDING_GROUPS = ((0, 2), (1, 3))  # first and last stage, same dp index
STAGE_MODULES = (("emb", "fc1", "act"), ("fc2", "drop", "head"))


class Stage(nn.Module):
    """Some of a model's submodules, under their own names, run in order (shared, not copied)."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        for name in names:
            self.add_module(name, getattr(model, name))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for module in self.children():
            x = module(x)
        return x


def pp_reference(rec: Recorder, tied: bool) -> None:
    model = make_model(torch.float64, tied=tied)
    rec.watch(model)
    x, y = batch()
    loss = lm_loss(model(x), y)
    rec.loss(loss)
    loss.backward()
    rec.grads(model)


def pp_step(
    env: RankEnv,
    rec: Recorder,
    tied: bool,
    sync_last_stage: bool = True,
    sync_embedding: bool = True,
) -> None:
    model = make_model(tied=tied)
    stage, dp_index = divmod(env.rank, 2)
    ranks = STAGES[stage]
    module = Stage(model, STAGE_MODULES[stage])
    rec.watch(module, Layout(ranks, (Shard(0),)))
    x, y = (rows_of(t, dp_index, 2) for t in batch())
    worker = StageWorker(
        module,
        stage,
        2,
        STAGES[0][dp_index] if stage else None,
        None if stage else STAGES[1][dp_index],
        list(x.chunk(MICRO)),
        list(y.chunk(MICRO)),
        (x.shape[0] // MICRO, SEQ, 4 * WIDTH),
    )
    gpipe(worker)  # all forwards, then all backwards; .grad accumulates over micro-batches
    worker.finish()
    if stage == 1:
        rec.loss(torch.tensor(worker.loss), Layout(ranks, (Partial("avg"),)))
    params = [p for p in module.parameters()]
    if stage == 0 or sync_last_stage:
        all_reduce_flat([p.grad for p in params], dist.ReduceOp.AVG, env.group(STAGES))
    tied_weight = model.emb.weight if tied else None
    if tied and sync_embedding:  # both copies get the sum of both uses' gradients
        dist.all_reduce(tied_weight.grad, group=env.group(EMBEDDING_GROUPS))
    for name, p in module.named_parameters():
        if p is tied_weight:
            rec.grad("emb.weight", p.grad, Layout(STAGES, (Replicate(), Replicate())))
        else:
            rec.grad(name, p.grad, replicated(ranks))


def cases() -> list[tuple[str, str, str, Case, Case]]:
    n = reduction_size(WORLD)
    untied = partial(
        Case, world_size=WORLD, reduction_size=n, reference=partial(pp_reference, tied=False)
    )
    tied = partial(
        Case, world_size=WORLD, reduction_size=n, reference=partial(pp_reference, tied=True)
    )
    return [
        (
            "pp_missing_dp_sync",
            "huggingface/picotron PR#3, PR#5",
            "grad head.weight",
            untied(
                name="pp_missing_dp_sync", step=partial(pp_step, tied=False, sync_last_stage=False)
            ),
            untied(name="pp_missing_dp_sync (fixed)", step=partial(pp_step, tied=False)),
        ),
        (
            "pp_tied_embeddings",
            "NVIDIA/Megatron-LM (_allreduce_word_embedding_grads)",
            "grad emb.weight",
            tied(name="pp_tied_embeddings", step=partial(pp_step, tied=True, sync_embedding=False)),
            tied(name="pp_tied_embeddings (fixed)", step=partial(pp_step, tied=True)),
        ),
    ]
