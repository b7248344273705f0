"""2D and 3D parallelism: each parallelism one small named step on an unmodified TinyGPT (lab 08).

One ``Topology`` (lab_utils.topology) hands out the named mesh axes ("pp", "dp", "tp"); the steps
below take an axis, never a global, and never edit model code (torchtitan's parallelize.py):

    2D, PyTorch (DTensor):   mesh = Topology(dp=2, tp=2).build_mesh()
                             apply_tp(model, mesh["tp"])       # parallelize_module
                             apply_fsdp(model, mesh["dp"])     # fully_shard (FSDP2)
    3D, from scratch:        stage = apply_pp(model, topo, rank)       # this rank's stage
                             apply_tp_ours(stage, mesh.get_group("tp"))  #
                             lab_utils.parallel.tensor_parallel.layers blocks
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

The training loops that compose these steps and measure each axis (2D, 3D) are lab 08's
experiments: ``lab_utils.experiments.lab08``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.models import TinyGPT, split_stages
from lab_utils.parallel.tensor_parallel import parallelize_block
from lab_utils.topology import Topology

# -- the named steps -----------------------------------------------------------------------------


def apply_tp(model: nn.Module, tp_mesh, replicate_attention_input: bool = False) -> nn.Module:
    """Megatron TP with torch's DTensor on every block of a model or pipeline stage, in place
    (torchtitan's apply_tp): q, k, v, fc ColwiseParallel; attn.proj, mlp.proj RowwiseParallel.
    Communication per block: forward 1 all-reduce after attention, 1 after the MLP (each
    RowwiseParallel output, 2(t-1)/t of (b, s, h) per rank); backward 1 per ColwiseParallel
    input gradient: 4, as q, k and v are three linears. replicate_attention_input=True makes the
    attention's input a replicated DTensor first (PrepareModuleInput, as torchtitan does), so
    autograd sums the q, k, v input gradients before ONE reduction: 2 per block, like our fused
    TPAttention. Lab 06 runs both plans; lab 08 composes the first with FSDP."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        parallelize_module,
    )

    plan = {
        "attn.q": ColwiseParallel(),
        "attn.k": ColwiseParallel(),
        "attn.v": ColwiseParallel(),
        "attn.proj": RowwiseParallel(),
        "mlp.fc": ColwiseParallel(),
        "mlp.proj": RowwiseParallel(),
    }
    if replicate_attention_input:
        plan["attn"] = PrepareModuleInput(
            input_layouts=(Replicate(),),
            desired_input_layouts=(Replicate(),),
            use_local_output=False,
        )
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


def apply_tp_ours(module: nn.Module, tp_group, sequence_parallel: bool = False) -> nn.Module:
    """Our Megatron blocks on every block of a model or stage, in place: the same plan as
    apply_tp, from lab_utils.parallel.tensor_parallel (parallelize_block, q/k/v fused)."""
    for block in module.blocks:
        parallelize_block(block, tp_group, sequence_parallel)
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
