"""Bugs in HOW gradients are reduced over data-parallel ranks (lab 14).

sum_vs_avg    the gradients all-reduced with SUM where the reference takes the mean over the
              global batch: every gradient exactly N times too large. pytorch#162338 ("Incorrect
              AVG reduction for GLOO", labelled "correctness (silent)"): FSDP2 on gloo summed
              where it should average; dinov3#250 fixed the same sum in a real FSDP2 run. Here
              with the course's flat all-reduce (collectives.all_reduce_flat): FSDP2's own
              divide factor of 1 needs PREMUL_SUM, which gloo refuses.
zero2_allreduce  a "ZeRO-2" that all-reduces the FULL gradient and then keeps its shard: every
              number is right, but it moves 2x the bytes and holds the full gradient, i.e. it
              is ZeRO-1 (nanochat#566). Only the collective count can catch it.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils.correctness.case import Case, RankEnv
from lab_utils.correctness.layout import FlatShard, Layout
from lab_utils.correctness.recorder import Recorder
from lab_utils.correctness.zoo.model import batch, dp_layouts, make_model, reduction_size, rows_of
from lab_utils.models import lm_loss
from lab_utils.parallel.backward_tls import without_autograd_context
from lab_utils.parallel.collectives import all_reduce_flat
from lab_utils.parallel.zero import FlatUnit, ZeroOptimizer

WORLD = 4
DP = tuple(range(WORLD))


def dp_reference(rec: Recorder) -> None:
    """The reference of every plain-DP bug: the global batch, float64, mean loss."""
    model = make_model(torch.float64)
    rec.watch(model)
    x, y = batch()
    loss = lm_loss(model(x), y)
    rec.loss(loss)
    loss.backward()
    rec.grads(model)


def dp_step(env: RankEnv, rec: Recorder, op: dist.ReduceOp) -> None:
    """Data parallelism with one flat all-reduce of every gradient under ``op``."""
    model = make_model()
    act, loss_layout, grad_layout = dp_layouts(DP)
    rec.watch(model, act)
    x, y = batch()
    loss = lm_loss(model(rows_of(x, env.rank, WORLD)), rows_of(y, env.rank, WORLD))
    rec.loss(loss, loss_layout)
    loss.backward()
    all_reduce_flat([p.grad for p in model.parameters()], op)  # AVG: the mean over ranks
    rec.grads(model, grad_layout)


class AllReduceZero2(ZeroOptimizer):
    """The bug: when a unit's last gradient arrives, all-reduce its FULL flat gradient
    (2(N-1)/N x 4 P_u bytes, the full P_u held) and keep my slice; the real ZeRO-2
    reduce-scatters ((N-1)/N x 4 P_u, only P_u / N kept). Same numbers, ZeRO-1's cost."""

    @without_autograd_context
    def _grad_arrived(self, u: FlatUnit) -> None:
        u.pending -= 1
        if u.pending:
            return
        u.pending = len(u.params)
        flat = F.pad(torch.cat([p.grad.flatten() for p in u.params]), (0, u.padded - u.numel))
        dist.all_reduce(flat, op=dist.ReduceOp.AVG, group=self.group)
        size = u.shard.numel()
        u.shard.grad.add_(flat[self.rank * size : (self.rank + 1) * size])
        for p in u.params:
            p.grad = None


def zero2_step(env: RankEnv, rec: Recorder, all_reduce: bool) -> None:
    model = make_model()
    act, loss_layout, _ = dp_layouts(DP)
    rec.watch(model, act)
    cls = AllReduceZero2 if all_reduce else ZeroOptimizer
    opt = cls(model, stage=2, units=[("model", model)], optimizer="sgd")
    x, y = batch()
    loss = lm_loss(model(rows_of(x, env.rank, WORLD)), rows_of(y, env.rank, WORLD))
    rec.loss(loss, loss_layout)
    loss.backward()  # the unit is reduced when its last gradient arrives
    rec.value("grad shard (flat)", opt.units[0].shard.grad, Layout(DP, (FlatShard(),)))


def zero_reference(rec: Recorder) -> None:
    model = make_model(torch.float64)
    rec.watch(model)
    x, y = batch()
    loss = lm_loss(model(x), y)
    rec.loss(loss)
    loss.backward()
    rec.value("grad shard (flat)", torch.cat([p.grad.flatten() for p in model.parameters()]))


def cases() -> list[tuple[str, str, str, Case, Case]]:
    n = reduction_size(WORLD)
    dp = partial(Case, world_size=WORLD, reference=dp_reference, reduction_size=n)
    zero = partial(
        Case,
        world_size=WORLD,
        reference=zero_reference,
        reduction_size=n,
        expect=(("all_reduce", DP, 0), ("reduce_scatter", DP, 1)),
    )
    return [
        (
            "sum_vs_avg",
            "pytorch/pytorch#162338, facebookresearch/dinov3#250",
            "grad head.weight",
            dp(name="sum_vs_avg", step=partial(dp_step, op=dist.ReduceOp.SUM)),
            dp(name="sum_vs_avg (fixed)", step=partial(dp_step, op=dist.ReduceOp.AVG)),
        ),
        (
            "zero2_allreduce",
            "karpathy/nanochat#566",
            "all_reduce on group (0, 1, 2, 3)",
            zero(name="zero2_allreduce", step=partial(zero2_step, all_reduce=True)),
            zero(name="zero2_allreduce (fixed)", step=partial(zero2_step, all_reduce=False)),
        ),
    ]
