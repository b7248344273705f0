"""The FSDP2 training script a practitioner writes, small enough to run on a laptop CPU.

    torchrun --standalone --nproc-per-node 2 scripts/train_fsdp2.py --steps 20 --out /tmp/fsdp2

(from the repository root; on GPUs the same script uses NCCL, one GPU per rank). Each rank:

    init_process_group           torchrun has set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    DistributedSampler           this rank's share of every epoch, the same shuffle everywhere
    fully_shard                  each block, then the root; the optimizer is built AFTER (shards)
    train                        loss.backward() gathers and reduce-scatters inside FSDP2
    dcp.save                     every rank writes its own shards: no rank holds the whole model
    dcp.load into a fresh model  a resume: the same weights, checked on a fixed batch
    destroy_process_group

Writes <out>/checkpoint/ (the DCP files) and, on rank 0, <out>/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from lab_utils.models import GPTConfig, TinyGPT, lm_loss  # any model with a list of blocks

CFG = GPTConfig(vocab_size=64, seq_len=16, n_layer=2, n_head=2, d_model=32)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--bf16", action="store_true", help="bf16 compute, fp32 reduce and master")
    p.add_argument("--out", type=Path, default=Path("fsdp2_run"))
    return p.parse_args()


def dataset(n: int = 256, seed: int = 0) -> TensorDataset:
    """Sequences following next = (5 * token + 3) % vocab: learnable in a few steps."""
    g = torch.Generator().manual_seed(seed)
    seq = torch.empty(n, CFG.seq_len + 1, dtype=torch.long)
    seq[:, 0] = torch.randint(CFG.vocab_size, (n,), generator=g)
    for t in range(CFG.seq_len):
        seq[:, t + 1] = (5 * seq[:, t] + 3) % CFG.vocab_size
    return TensorDataset(seq[:, :-1], seq[:, 1:])


def build_model(device: torch.device, bf16: bool) -> torch.nn.Module:
    model = TinyGPT(CFG, seed=0).to(device)  # the same weights on every rank
    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if bf16
        else MixedPrecisionPolicy()
    )
    for block in model.blocks:
        fully_shard(block, mp_policy=mp)  # one unit per block: gathered, freed, reduced together
    fully_shard(model, mp_policy=mp)  # the root: embeddings, final norm, head
    return model


def main() -> None:
    args = parse()
    one_gpu_each = torch.cuda.device_count() >= int(
        os.environ["LOCAL_WORLD_SIZE"]
    )  # NCCL: a GPU per process
    backend = "nccl" if one_gpu_each else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)

    data = dataset()
    sampler = DistributedSampler(
        data, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True
    )  # equal step counts on every rank
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler, drop_last=True)
    model = build_model(device, args.bf16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)  # over this rank's shards

    losses, step, epoch = [], 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        for x, y in loader:
            loss = lm_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            mean = loss.detach().float()
            dist.all_reduce(mean, op=dist.ReduceOp.AVG)  # for the log only
            losses.append(mean.item())
            step += 1
            if step == args.steps:
                break
        epoch += 1

    checkpoint = args.out / "checkpoint"
    model_state, optim_state = get_state_dict(model, optimizer)  # sharded: DTensors
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(checkpoint))

    fresh = build_model(device, args.bf16)  # a restarted job: new model, new optimizer
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=args.lr)
    fresh_model_state, fresh_optim_state = get_state_dict(fresh, fresh_optimizer)
    state = {"model": fresh_model_state, "optim": fresh_optim_state}
    dcp.load(state, checkpoint_id=str(checkpoint))  # each rank reads its own shards
    set_state_dict(
        fresh, fresh_optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )

    x, y = data[:8]  # a fixed batch: the trained and the resumed model must agree
    with torch.no_grad():
        before = lm_loss(model(x.to(device)), y.to(device)).item()
        after = lm_loss(fresh(x.to(device)), y.to(device)).item()
    if rank == 0:
        print(f"{world} ranks, {args.steps} steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
        print(f"resumed from {checkpoint}: loss on a fixed batch {before:.6f} -> {after:.6f}")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(
            json.dumps(
                {"world": world, "losses": losses, "eval_before": before, "eval_after": after}
            )
        )
    if before != after:
        raise SystemExit(f"rank {rank}: the resumed model differs ({before} vs {after})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # torch 2.13 + gloo: a collective launched inside backward (DDP's buckets, FSDP's reduce-
    # scatters) can be freed by gloo's worker thread during interpreter shutdown, which aborts the
    # process AFTER the work is done ("terminate called without an active exception"; the course's
    # docs/teardown.md has the core dump). Everything is written and the group destroyed: leave.
    sys.stdout.flush(), sys.stderr.flush(), os._exit(0)
