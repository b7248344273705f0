"""Bugs of tensor parallelism: the wrong group, the wrong random stream, the wrong norm (lab 14).

All three use the course's Megatron layers (parallel/tensor_parallel): fc1 a
ColumnParallelLinear, fc2 a RowParallelLinear.

tp_mesh_order   dp=2 x tp=2 on ranks numbered tp-fastest (rank = 2 dp + tp), but the TP groups
                are built from the transposed grid, (0, 2) and (1, 3): ranks 1 and 2 take the
                column shard their WRONG group gives them, and their partial sums are added to
                another data shard's (process groups from the wrong grid: NVIDIA/Megatron-LM#5754,
                all-gather groups that did not match the model-parallel groups).
tp_dropout_rng  dropout after the row-parallel fc2, where all TP ranks hold the SAME activation,
                drawn with a seed that differs per TP rank: the "replicas" silently diverge
                (Megatron's rule, megatron/core/tensor_parallel/random.py; awslabs/slapo#21).
                The fix: seed_tensor_parallel (the same replicated stream on every TP rank).
clip_local_norm torch.nn.utils.clip_grad_norm_ on TP-sharded gradients sees only this rank's
                shards: every rank clips by a different, too small norm (torchtune#2420,
                "clip_grad_norm does not work with Tensor Parallelism"; NeMo-RL#3788 counted
                replicated gradients tp times). The fix: fsdp.clip_grad_norm_, which sums the
                sharded squares over the group and counts the replicated ones once.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist

from lab_utils.correctness.case import Case, RankEnv
from lab_utils.correctness.layout import Layout, Partial, Replicate, Shard
from lab_utils.correctness.recorder import Recorder
from lab_utils.correctness.zoo.model import TinyLM, batch, make_model, reduction_size, rows_of
from lab_utils.models import lm_loss
from lab_utils.parallel.collectives import all_reduce_flat
from lab_utils.parallel.fsdp import clip_grad_norm_
from lab_utils.parallel.tensor_parallel import (
    ColumnParallelLinear,
    RowParallelLinear,
    seed_tensor_parallel,
)

WORLD = 4
GRID = ((0, 1), (2, 3))  # dp x tp, tp fastest: rank = 2 dp + tp
DROP_SEED, MAX_NORM = 7, 0.05
SHARDED = {"fc1": -1, "act": -1}  # forward outputs split on the last dim (column-parallel)
GRAD_SHARD = {"fc1.weight": 0, "fc1.bias": 0, "fc2.weight": 1}  # the rest is replicated


def tp_layouts(grid: tuple) -> tuple:
    """(forward layout by name, grad layout by name, loss layout) for a dp x tp grid."""

    def forward(name: str) -> Layout:
        inner = Shard(SHARDED[name]) if name in SHARDED else Replicate()
        return Layout(grid, (Shard(0), inner))

    def grad(name: str) -> Layout:
        inner = Shard(GRAD_SHARD[name]) if name in GRAD_SHARD else Replicate()
        return Layout(grid, (Replicate(), inner))

    return forward, grad, Layout(grid, (Partial("avg"), Replicate()))


def tensor_parallelize(model: TinyLM, group) -> TinyLM:
    model.fc1 = ColumnParallelLinear(model.fc1, group)  # (B, T, 4C/t)
    model.fc2 = RowParallelLinear(model.fc2, group)  # partial sums, all-reduced: (B, T, C)
    return model


def tp_reference(rec: Recorder, p_drop: float = 0.0, clip: bool = False) -> None:
    model = make_model(torch.float64, p_drop=p_drop)
    rec.watch(model)
    x, y = batch()
    torch.manual_seed(DROP_SEED)  # the replicated stream every TP rank must share
    loss = lm_loss(model(x), y)
    rec.loss(loss)
    loss.backward()
    rec.grads(model)
    if clip:
        rec.value("clip_grad_norm", torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM))


def tp_step(
    env: RankEnv,
    rec: Recorder,
    grid: tuple,
    tp_groups: tuple,
    p_drop: float = 0.0,
    seed_per_rank: bool = False,
    clip: str = "",
) -> None:
    """One dp x tp step. ``grid`` is the layout the data and the bisector follow;
    ``tp_groups`` the groups the TP layers really use (the bug: the transposed grid)."""
    tp = env.group(tp_groups)
    dp = env.group(tuple(zip(*grid)))  # the columns of the grid: same tp index
    model = tensor_parallelize(make_model(p_drop=p_drop), tp)
    forward, grad, loss_layout = tp_layouts(grid)
    rec.watch(model, forward)
    dp_index, n_dp = [i for i, row in enumerate(grid) if env.rank in row][0], len(grid)
    x, y = batch()
    tp_rank = dist.get_rank(tp)
    if seed_per_rank:
        torch.manual_seed(DROP_SEED + tp_rank)  # the bug: a replicated region, own streams
    else:
        seed_tensor_parallel(DROP_SEED, tp)  # the replicated stream: one seed for all
    loss = lm_loss(model(rows_of(x, dp_index, n_dp)), rows_of(y, dp_index, n_dp))
    rec.loss(loss, loss_layout)
    loss.backward()
    all_reduce_flat([p.grad for p in model.parameters()], dist.ReduceOp.AVG, dp)
    rec.grads(model, grad)
    if clip == "local":  # the bug: the norm of MY shards (and replicas) only
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
    elif clip == "global":
        replicated = [p for n, p in model.named_parameters() if n not in GRAD_SHARD]
        norm = clip_grad_norm_(model.parameters(), MAX_NORM, tp, replicated)
    if clip:
        rec.value("clip_grad_norm", norm, Layout(grid, (Replicate(), Replicate())))


def cases() -> list[tuple[str, str, str, Case, Case]]:
    n = reduction_size(WORLD)
    grid4 = tp_all = ((0, 1, 2, 3),)  # dp=1 x tp=4: one TP group of all ranks
    mesh = partial(Case, world_size=WORLD, reduction_size=n, reference=tp_reference)
    drop = partial(
        Case, world_size=WORLD, reduction_size=n, reference=partial(tp_reference, p_drop=0.5)
    )
    clip = partial(
        Case, world_size=WORLD, reduction_size=n, reference=partial(tp_reference, clip=True)
    )
    return [
        (
            "tp_mesh_order",
            "NVIDIA/Megatron-LM#5754",
            "forward fc1",
            mesh(
                name="tp_mesh_order", step=partial(tp_step, grid=GRID, tp_groups=((0, 2), (1, 3)))
            ),
            mesh(name="tp_mesh_order (fixed)", step=partial(tp_step, grid=GRID, tp_groups=GRID)),
        ),
        (
            "tp_dropout_rng",
            "awslabs/slapo#21, InternLM/InternLM#405",
            "forward drop",
            drop(
                name="tp_dropout_rng",
                step=partial(tp_step, grid=grid4, tp_groups=tp_all, p_drop=0.5, seed_per_rank=True),
            ),
            drop(
                name="tp_dropout_rng (fixed)",
                step=partial(tp_step, grid=grid4, tp_groups=tp_all, p_drop=0.5),
            ),
        ),
        (
            "clip_local_norm",
            "meta-pytorch/torchtune#2420, NVIDIA-NeMo/RL#3788",
            "value clip_grad_norm",
            clip(
                name="clip_local_norm",
                step=partial(tp_step, grid=GRID, tp_groups=GRID, clip="local"),
            ),
            clip(
                name="clip_local_norm (fixed)",
                step=partial(tp_step, grid=GRID, tp_groups=GRID, clip="global"),
            ),
        ),
    ]
