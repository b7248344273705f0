"""Lab 06 on the emulated cluster (section 7): the same TP step inside one node and across two.

A Megatron TP step (t = 2, the whole world) and a 2-stage pipeline step (one micro-batch, plain
send / recv) run on ``lab_utils.twin``'s emulated cluster, once with both GPUs in one node
(NVLink) and once with one GPU in each of two nodes (InfiniBand): the code is the same, only the
cluster changes. ``layer_scale`` charges every FLOP and byte as a full-width layer's, so the
proportions of compute and communication are a real model's.

    tp_pp_steps     the rank worker: a warm-up, then one marked TP step and one marked PP step
    step_times      its result on every rank -> {kind: slowest rank's emulated (or wall) seconds}
    layer_scale     the Scale of a full-width layer (b, s, h) over the lab's tiny one
    placements      the two clusters: TP group inside a node, and spanning two
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from lab_utils import twin
from lab_utils.data import token_batches
from lab_utils.models import GPTConfig, TinyGPT, lm_loss, split_stages
from lab_utils.parallel.tensor_parallel import tensor_parallelize


def _layer_flops(b: int, s: int, h: int) -> float:
    """Training FLOPs of one transformer layer (forward + backward, no recompute):
    72 b s h^2 (1 + s / 6h), Narayanan et al. 2021 eq. (3) per layer."""
    return 72 * b * s * h * h * (1 + s / (6 * h))


def layer_scale(
    cfg: GPTConfig,
    batch: int,
    full_h: int = 4096,
    full_s: int = 2048,
    full_b: int = 1,
    full_bytes: int = 2,
) -> twin.Scale:
    """FLOPs by one layer's training FLOPs, bytes by the b x s x h activation TP all-reduces
    (fp32 here, ``full_bytes`` per element there). One ratio for all FLOPs and one for all
    bytes: an approximation that keeps a full-width layer's compute-to-communication ratio."""
    flops = _layer_flops(full_b, full_s, full_h) / _layer_flops(batch, cfg.seq_len, cfg.d_model)
    nbytes = full_b * full_s * full_h * full_bytes / (batch * cfg.seq_len * cfg.d_model * 4)
    return twin.Scale(flops, nbytes, f"each layer as wide as h={full_h}, s={full_s}, b={full_b}")


def placements(preset: str = "DGX H100") -> dict[str, twin.Cluster]:
    """Two GPUs of ``preset``: in one node, and one in each of two nodes."""
    return {
        "inside one node": twin.Cluster.preset(preset, nodes=1, gpus_per_node=2),
        "across two nodes": twin.Cluster.preset(preset, nodes=2, gpus_per_node=1),
    }


def tp_pp_steps(ctx: Any, cfg: GPTConfig, batch: int) -> dict[str, tuple[float | None, float]]:
    """A TP step (t = 2) and a 2-stage pipeline step (one micro-batch, no overlap), each after a
    warm-up: {kind: (emulated seconds, this machine's wall seconds)} of the marked step (the
    emulated time is None outside an emulated run)."""
    idx, tgt = token_batches(1, batch, cfg.seq_len, cfg.vocab_size, seed=4)[0]
    tp_model = tensor_parallelize(TinyGPT(cfg, seed=0), ctx.group)
    stage = split_stages(TinyGPT(cfg, seed=0), 2)[ctx.rank]  # rank 0: embeddings + 2 blocks

    def tp_step() -> None:  # 4 all-reduces of (B, T, C) per layer, on the critical path
        lm_loss(tp_model(idx), tgt).backward()

    def pp_step() -> None:  # one activation forward, its gradient back
        if ctx.rank == 0:
            h = stage(idx)  # (B, T, C)
            dist.send(h.detach(), dst=1)
            grad = torch.empty_like(h)
            dist.recv(grad, src=1)
            h.backward(grad)
        else:
            h = torch.empty(batch, cfg.seq_len, cfg.d_model, requires_grad=True)
            dist.recv(h.data, src=0)
            lm_loss(stage(h), tgt).backward()
            dist.send(h.grad, dst=0)

    out = {}
    for kind, step in (("TP", tp_step), ("PP", pp_step)):
        step()  # warm-up
        dist.barrier(group=ctx.group)
        start, wall = twin.step(), time.perf_counter()
        step()
        end, wall = twin.step(), time.perf_counter() - wall
        out[kind] = (None if start is None else end - start, wall)
    return out


def step_times(results: list[dict], clock: int = 0) -> dict[str, float]:
    """{kind: the slowest rank's step} from every rank's ``tp_pp_steps`` result; ``clock`` 0 is
    the emulated time, 1 this machine's wall clock."""
    return {kind: max(r[kind][clock] for r in results) for kind in results[0]}
