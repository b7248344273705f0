"""Lab 05 on the emulated cluster (section 7b): FSDP's prefetch, and ZeRO-3 against ZeRO-2, on a
GPU cluster's clock.

Our FSDP (``parallel/fsdp.py``) and torch's ``fully_shard`` (FSDP2) train the same TinyGPT on
``lab_utils.twin``'s emulated cluster: real shards and gradients through gloo, time from the
cluster's virtual clock (compute from the FLOPs each rank ran, each all-gather and reduce-scatter
from the links its group spans). A prefetched all-gather is issued asynchronously, so it runs on
the communication stream while the current block computes: the overlap comes out of the FSDP
code, not out of a formula. Each variant gets a warm-up step, then one step between two
``twin.step()`` marks (deterministic: one step is the step time).

    VARIANTS                  name -> (family, prefetch, reshard_after_forward)
    fsdp_steps(ctx, cfg, ...) the rank worker: [(name, start, end)] of each measured step
    step_points(em)           the run -> one FsdpStep per variant (step, compute, comm, hidden)
    step_window(em, i)        the i-th measured step as an Emulation (what twin.figure draws)
    fsdp_cluster / fsdp_scale the lab's cluster (2 DGX H100 nodes) and Scale (Llama 3 8B)
    prefetch_fully_shard(m)   FSDP2's explicit prefetch, issued asynchronously as on a GPU

ZeRO-2 here is FSDP that keeps each unit's full weights from forward to backward
(``reshard_after_forward=False``, FSDP1's SHARD_GRAD_OP): ZeRO-2's traffic, no second all-gather.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab_utils import twin
from lab_utils.data import shard_for_rank, token_batches
from lab_utils.experiments.common import emulated_window
from lab_utils.experiments.lab05.sharding import BF16, LR, apply_fully_shard
from lab_utils.models import GPTConfig, TinyGPT, count_params
from lab_utils.parallel.fsdp import FSDP
from lab_utils.reference import default_loss, make_optimizer

# name -> (family: "ours" | "torch", prefetch, reshard_after_forward: True = ZeRO-3)
VARIANTS: dict[str, tuple[str, bool, bool]] = {
    "FSDP": ("ours", False, True),
    "FSDP prefetch": ("ours", True, True),
    "FSDP keep, prefetch": ("ours", True, False),
    "fully_shard": ("torch", False, True),
    "fully_shard prefetch": ("torch", True, True),
    "fully_shard keep, prefetch": ("torch", True, False),
}
FULL_MODEL = "llama3-8b"  # whose FLOPs and bytes the emulated clock charges
TOKENS_PER_RANK = 8192  # its tokens per GPU per step (one 8k sequence)


@dataclass
class FsdpStep:
    """One variant's measured step on the emulated clock (seconds; rank 0 for the streams)."""

    name: str
    step_s: float  # slowest rank
    compute_s: float  # compute stream busy
    comm_s: float  # communication stream busy (all-gathers, reduce-scatters)
    hidden_s: float  # communication that ran under compute


def prefetch_fully_shard(model: TinyGPT) -> None:
    """FSDP2's explicit prefetch: each block all-gathers the next one in forward and the
    previous one in backward. On a GPU the default all-gather is already asynchronous to the
    CPU (it runs on its own CUDA stream); on gloo it blocks, so ``_set_unshard_async_op(True)``
    (torch's private switch) issues it with ``async_op=True``, as the GPU stream would run it."""
    blocks = list(model.blocks)
    for i, block in enumerate(blocks):
        if i + 1 < len(blocks):
            block.set_modules_to_forward_prefetch([blocks[i + 1]])
        if i > 0:
            block.set_modules_to_backward_prefetch([blocks[i - 1]])
    model._set_unshard_async_op(True)


def _build(name: str, cfg: GPTConfig, group: Any) -> Any:
    family, prefetch, reshard = VARIANTS[name]
    model = TinyGPT(cfg, seed=0)
    if family == "ours":
        return FSDP(model, group, mp=BF16, prefetch=prefetch, reshard_after_forward=reshard)
    apply_fully_shard(model, group, reshard_after_forward=reshard, mp=BF16)
    if prefetch:
        prefetch_fully_shard(model)
    return model


def fsdp_steps(
    ctx: Any, cfg: GPTConfig, batch_per_rank: int, names: tuple = tuple(VARIANTS)
) -> list[tuple[str, float | None, float | None]]:
    """For each variant: a warm-up step, then one step between two ``twin.step()`` marks.
    Returns [(name, start, end)] on this rank's emulated clock (Nones outside an emulated run)."""
    b = token_batches(1, batch_per_rank * ctx.world_size, cfg.seq_len, cfg.vocab_size, seed=1)
    x, y = shard_for_rank(b[0], ctx.rank, ctx.world_size)  # (batch_per_rank, T)
    out = []
    for name in names:
        model = _build(name, cfg, ctx.group)
        opt = make_optimizer(model.parameters(), "adamw", LR)  # over the shards
        for _ in range(2):
            start = twin.step()
            default_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            end = twin.step()
        out.append((name, start, end))
    return out


def step_window(em: twin.Emulation, i: int) -> twin.Emulation:
    """The ``i``-th measured step of an ``fsdp_steps`` run, from 0 (what ``twin.figure`` draws)."""
    return emulated_window(em, [rec.result[i][1:3] for rec in em.records])


def step_points(em: twin.Emulation) -> dict[str, FsdpStep]:
    """One FsdpStep per variant of an ``fsdp_steps`` run, by name."""
    out = {}
    for i, (name, *_) in enumerate(em.results[0]):
        one = step_window(em, i)
        out[name] = FsdpStep(
            name, max(one.step_times()), one.busy(0, "compute"), one.busy(0, "comm"), one.overlap(0)
        )
    return out


def fsdp_cluster(nodes: int = 2, gpus_per_node: int = 2, preset: str = "DGX H100") -> twin.Cluster:
    """The lab's cluster: ``nodes`` x ``gpus_per_node`` GPUs of ``preset`` (4 ranks: 2 x 2, so
    every FSDP collective crosses the network)."""
    return twin.Cluster.preset(preset, nodes=nodes, gpus_per_node=gpus_per_node)


def fsdp_scale(cfg: GPTConfig, batch_per_rank: int) -> twin.Scale:
    """Charge FULL_MODEL's FLOPs (TOKENS_PER_RANK per GPU and step) and bytes for the lab
    model's step of ``batch_per_rank`` sequences per rank (``twin.Scale.model``)."""
    per_token = twin.Scale.model(
        FULL_MODEL, count_params(TinyGPT(cfg)), cfg.n_layer, cfg.d_model, cfg.seq_len
    )
    tokens = TOKENS_PER_RANK / (batch_per_rank * cfg.seq_len)
    return twin.Scale(
        per_token.flops * tokens,
        per_token.bytes,
        f"{per_token.name}, x{tokens:.3g} tokens per step",
    )
