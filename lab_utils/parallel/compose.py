"""2D and 3D parallelism: each parallelism one small named step on an unmodified TinyGPT (lab 08).

One ``Topology`` (lab_utils.topology) hands out the named mesh axes ("pp", "dp", "tp"); the steps
below take an axis, never a global, and never edit model code (torchtitan's parallelize.py):

    2D, PyTorch (DTensor):   mesh = Topology(dp=2, tp=2).build_mesh()
                             apply_tp(model, mesh["tp"])       # parallelize_module
                             apply_fsdp(model, mesh["dp"])     # fully_shard (FSDP2)
    3D, from scratch:        stage = apply_pp(model, topo, rank)       # this rank's stage
                             apply_tp_ours(stage, mesh.get_group("tp"))  # lab_utils.parallel.tensor_parallel.layers blocks
                             1F1B with p2p on the pp axis (StageWorker, neighbours from
                             pipeline_neighbours(topo, rank)), then
                             sync_dp_grads(stage, mesh.get_group("dp"))

Communication per optimizer step and per rank (b rows per micro-batch, T tokens, C = d_model,
e bytes per element, m micro-batches, L_s layers on the stage, P_s = this rank's parameter bytes;
ring formulas of lab_utils.calc.comm):
    tp axis (t ranks): 2 all-reduces of (b, T, C) per layer forward, 2 backward:
                       4 m L_s * 2(t-1)/t * bTCe          (calc.tp_layer_comm)
                       [apply_tp: 2 more in backward, as q, k, v are not fused]
    pp axis:           1 activation (b, T, C) sent forward and 1 gradient sent back per micro-batch
                       per stage boundary: m * bTCe each way (calc.pp_bytes_per_microbatch)
    dp axis (d ranks): DDP-style: 1 all-reduce of the gradients, 2(d-1)/d P_s;
                       FSDP: all-gather (forward) + all-gather (backward) + reduce-scatter,
                       3(d-1)/d P_s (calc.dp_bytes_per_rank)
"""
from __future__ import annotations

import itertools
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.data import shard_for_rank, token_batches
from lab_utils.measure import CommLedger
from lab_utils.models import GPTConfig, TinyGPT, lm_loss, split_stages
from lab_utils.parallel.pipeline_parallel.schedules import one_f_one_b
from lab_utils.parallel.pipeline_parallel.stage import StageWorker, pipeline_neighbours
from lab_utils.reference import make_optimizer
from lab_utils.topology import Topology
from lab_utils.parallel.tensor_parallel import layers as T

CFG = GPTConfig(vocab_size=64, seq_len=16, n_layer=4, n_head=4, d_model=32)
LR = 1e-2
_TAGS = itertools.count(1)  # a fresh p2p tag base per pipeline step (same sequence on every rank)


# -- the named steps -----------------------------------------------------------------------------

def apply_tp(model: nn.Module, tp_mesh) -> nn.Module:
    """Megatron TP with torch's DTensor: q, k, v, fc column-wise; attn.proj, mlp.proj row-wise.
    Per block: forward 1 all-reduce after attention, 1 after the MLP; backward 1 per column-wise
    linear (its input gradient): 4, as q, k, v are three linears (our TPAttention fuses them: 1)."""
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.proj": RowwiseParallel(), "mlp.fc": ColwiseParallel(),
            "mlp.proj": RowwiseParallel()}
    for block in model.blocks:
        parallelize_module(block, tp_mesh, plan)
    return model


def apply_fsdp(model: nn.Module, dp_mesh) -> nn.Module:
    """FSDP2 on the dp axis: one unit per block, then the root (embeddings, ln_f, head).
    On TP DTensors the result is a 2D DTensor: dim 0 of each TP shard cut again over dp."""
    from torch.distributed.fsdp import fully_shard
    for block in model.blocks:
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    return model


def apply_pp(model: TinyGPT, topo: Topology, rank: int) -> nn.Module:
    """This rank's pipeline stage: the blocks of stage coords(rank)["pp"] (lab_utils.models)."""
    return split_stages(model, topo.pp)[topo.coords(rank)["pp"]]


def apply_tp_ours(module: nn.Module, tp_group) -> nn.Module:
    """Our Megatron blocks (lab_utils.parallel.tensor_parallel.layers) on every block of a model or stage, in place."""
    for block in module.blocks:
        block.attn = T.TPAttention(block.attn, tp_group)
        block.mlp = T.TPMLP(block.mlp, tp_group)
    return module


def sync_dp_grads(module: nn.Module, dp_group) -> int:
    """Average the gradients over the dp axis: ONE all-reduce of all grads, flattened
    (2(d-1)/d * P_s bytes per rank). Returns the bytes all-reduced (P_s)."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat, group=dp_group)
    flat /= dist.get_world_size(dp_group)
    for g, new in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(new.view_as(g))
    return flat.numel() * flat.element_size()


# -- experiments (each runs on every rank) -------------------------------------------------------

def _by_axis(ledger: CommLedger, topo: Topology) -> dict:
    """Calls and bytes sent by mesh axis, told apart by kind: p2p -> pp; the "dp sync" phase and
    FSDP's all-gathers / reduce-scatters -> dp; the all-reduces inside the layers -> tp (each
    checked against its axis's group size)."""
    size = {"tp": topo.tp, "dp": topo.dp}
    out = {ax: {"calls": 0, "bytes": 0.0, "ops": {}} for ax in ("tp", "pp", "dp")}
    for r in ledger.records:
        if r.op in ("send", "recv"):
            ax = "pp"
        elif r.phase == "dp sync" or r.op in ("all_gather", "reduce_scatter"):
            ax = "dp"  # our gradient all-reduce, FSDP's gathers and reduce-scatters
        else:
            ax = "tp"  # the all-reduces inside the layers
        assert ax == "pp" or r.group_size == size[ax], (r, ax)
        row = out[ax]
        row["calls"] += 1
        row["bytes"] += r.bytes_sent
        row["ops"][r.op] = row["ops"].get(r.op, 0) + 1
    return out


def _placements(model: nn.Module, names: tuple[str, ...]) -> dict:
    """Mesh axis -> placement, global and local shape of a few DTensor parameters."""
    params = dict(model.named_parameters())
    out = {}
    for n in names:
        p = params[n]
        axes = p.device_mesh.mesh_dim_names
        out[n] = dict(placements={a: str(pl) for a, pl in zip(axes, p.placements)},
                      shape=tuple(p.shape), local=tuple(p.to_local().shape))
    return out


def train_2d(ctx, variant: str = "torch", steps: int = 3, global_batch: int = 16,
             cfg: GPTConfig = CFG, dp: int = 2, tp: int = 2) -> dict:
    """dp x tp training of TinyGPT. variant "torch": apply_tp + apply_fsdp (DTensor, FSDP2);
    "ours": apply_tp_ours + sync_dp_grads. Each dp group trains on its shard of the global
    batch; the tp ranks of a dp group see the same rows. Returns the mean loss of the global
    batch per step (every rank), the first step's full gradients and the last step's
    communication by axis."""
    topo = Topology(dp=dp, tp=tp)
    mesh = topo.build_mesh()
    c = topo.coords(ctx.rank)
    model = TinyGPT(cfg, seed=0)  # same seed everywhere: every rank starts from the same weights
    if variant == "torch":
        apply_tp(model, mesh["tp"])
    else:
        apply_tp_ours(model, mesh.get_group("tp"))
    sizes = _param_bytes(model)  # this rank's TP shard, before FSDP cuts it over dp
    if variant == "torch":
        apply_fsdp(model, mesh["dp"])
    opt = make_optimizer(model.parameters(), "adamw", lr=LR)
    losses, grads0, ledger = [], None, CommLedger()
    for i, batch in enumerate(token_batches(steps, global_batch, cfg.seq_len, cfg.vocab_size, 1)):
        x, y = shard_for_rank(batch, c["dp"], dp)  # (B/dp, T): the same on both tp ranks
        ledger.clear()
        with ledger:
            opt.zero_grad(set_to_none=True)
            loss = lm_loss(model(x), y)
            loss.backward()
            if variant == "ours":
                with ledger.phase("dp sync"):
                    sync_dp_grads(model, mesh.get_group("dp"))
            opt.step()
        if i == 0:  # full gradients (collectives: every rank gathers its shards)
            grads0 = ({n: p.grad.full_tensor() for n, p in model.named_parameters()}
                      if variant == "torch" else T.unshard(model, grads=True))
        losses.append(loss.item())
    mean = torch.tensor(losses)
    dist.all_reduce(mean, group=mesh.get_group("dp"))  # equal shards: mean of the dp means
    out = dict(losses=(mean / dp).tolist(), grads=grads0, comm=_by_axis(ledger, topo), coords=c,
               param_bytes=sizes)
    if variant == "torch":
        out["placements"] = _placements(model, ("blocks.0.mlp.fc.weight",
                                                "blocks.0.mlp.proj.weight", "ln_f.weight"))
    return out


def experiments_2d(ctx, steps: int = 3, variants: tuple[str, ...] = ("torch", "ours"),
                   **kwargs: Any) -> dict:
    """Several 2D runs in one launch: {variant: train_2d(...)}."""
    return {v: train_2d(ctx, v, steps, **kwargs) for v in variants}


def _param_bytes(model: nn.Module) -> dict[str, int]:
    """Bytes of this rank's (local) parameters: in the blocks, and the rest (the root)."""
    out = {"blocks": 0, "root": 0}
    for n, p in model.named_parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        out["blocks" if n.startswith("blocks.") else "root"] += local.numel() * local.element_size()
    return out


def train_3d(ctx, steps: int = 3, m: int = 4, micro_batch: int = 2, cfg: GPTConfig = CFG,
             dp: int = 2, tp: int = 2, pp: int = 2) -> dict:
    """dp x tp x pp from scratch: 1F1B over the pp axis, our Megatron TP inside each stage,
    one gradient all-reduce over the dp axis per step. Global batch = dp * m * micro_batch.
    Returns the global mean loss per step (from the last stage), the first step's gradients
    under full-model names (unsharded over tp), and the last step's communication by axis."""
    topo = Topology(dp=dp, tp=tp, pp=pp)
    topo.check(ctx.world_size)
    mesh = topo.build_mesh()
    c = topo.coords(ctx.rank)
    model = TinyGPT(cfg, seed=0)
    first_block = sum(len(s.blocks) for s in split_stages(model, pp)[:c["pp"]])
    stage = apply_tp_ours(apply_pp(model, topo, ctx.rank), mesh.get_group("tp"))
    opt = make_optimizer(stage.parameters(), "adamw", lr=LR)
    prev_rank, next_rank = pipeline_neighbours(topo, ctx.rank)  # global ranks on the pp axis
    B = dp * m * micro_batch
    losses, grads0, ledger = [], None, CommLedger()
    for i, batch in enumerate(token_batches(steps, B, cfg.seq_len, cfg.vocab_size, 1)):
        x, y = shard_for_rank(batch, c["dp"], dp)  # (m * b, T): this dp group's rows
        w = StageWorker(stage, c["pp"], pp, prev_rank, next_rank, x.chunk(m), y.chunk(m),
                        (micro_batch, cfg.seq_len, cfg.d_model), tag=next(_TAGS) * 1024)
        ledger.clear()
        with ledger:
            opt.zero_grad(set_to_none=True)
            with ledger.phase("pipeline"):
                one_f_one_b(w)  # m forwards and m backwards, p2p on the pp axis, TP inside
                w.finish()
            with ledger.phase("dp sync"):
                p_bytes = sync_dp_grads(stage, mesh.get_group("dp"))
            opt.step()
        if i == 0:  # collectives over tp: every rank of the stage calls it
            grads0 = _full_grads(stage, first_block)
        loss = torch.tensor([w.loss if w.last and c["tp"] == 0 else 0.0])
        dist.all_reduce(loss)  # one rank per dp group holds its shard's mean loss: sum / dp
        losses.append(loss.item() / dp)
    return dict(losses=losses, grads=grads0, comm=_by_axis(ledger, topo), coords=c,
                layers=len(stage.blocks), param_bytes=p_bytes)


def _full_grads(stage: nn.Module, first_block: int) -> dict[str, torch.Tensor]:
    """Gradients of this stage under the full model's names, TP shards gathered (all-gathers)."""
    out = {}
    for i, block in enumerate(stage.blocks):
        out |= {f"blocks.{first_block + i}.{n}": g for n, g in T.unshard(block, grads=True).items()}
    for n, p in stage.named_parameters():
        if not n.startswith("blocks."):
            out[n] = p.grad.clone()
    return out


def reference_grads(data_seed: int = 1, global_batch: int = 16,
                    cfg: GPTConfig = CFG) -> dict[str, torch.Tensor]:
    """One process, whole first batch: the gradients the 3D run must reproduce at step 0."""
    model = TinyGPT(cfg, seed=0)
    x, y = token_batches(1, global_batch, cfg.seq_len, cfg.vocab_size, data_seed)[0]
    lm_loss(model(x), y).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}
