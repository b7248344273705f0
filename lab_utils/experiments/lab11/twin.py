"""Lab 11 on the emulated cluster (``lab_utils.twin``): a checkpoint's stall, sync vs async, and
a straggler, on a GPU cluster's clock instead of this machine's shared cores.

    checkpoint_steps(ctx, mode, steps, save_after)   FSDP2 training steps with one checkpoint;
                        the save is charged on the rank's "io" stream (``twin.io``): a
                        synchronous save waits for the whole write, an asynchronous one for the
                        staging copy only, its write overlapping the next steps
    save_times(em)      {step without a save, stall, until complete} of one such run (emulated s)
    straggler_steps(ctx, steps)    plain DDP steps; run on a cluster where one GPU is slow
                        (``Cluster.slow_ranks``) to see every rank wait for it
    per_rank_compute(em)           compute seconds of every rank in every marked step
    lab_scale(cfg, batch)          the Scale: GPT-2 XL's FLOPs (128 Ki tokens per step) and bytes

Every checkpoint byte here is real: the bytes of this rank's shards of the model and AdamW state
(``get_state_dict``), times the Scale's byte ratio. What is modelled is the storage:
STORAGE_BYTES_PER_S per GPU and STAGING_BYTES_PER_S for the device-to-host copy.
"""

from __future__ import annotations

from typing import Any

from lab_utils import twin
from lab_utils.calc import hardware
from lab_utils.experiments.common import marked_sgd_steps, rank_batches
from lab_utils.experiments.lab11.elastic import shard_bytes
from lab_utils.experiments.lab11.training import RunConfig, build
from lab_utils.models import GPTConfig, TinyGPT, count_params
from lab_utils.reference import default_loss
from lab_utils.twin import session as twin_session

FULL_MODEL, FULL_TOKENS = "gpt2-xl", 2**17  # what the clock charges: GPT-2 XL, 128 Ki tokens
# Storage: Llama 3's Tectonic file system sustains 2 TB/s for the 16,384-GPU job (Llama Team,
# "The Llama 3 Herd of Models", 2024, Sec. 3.3.1): 2e12 / 16384 = 122 MB/s per GPU when every GPU
# writes its shard at once, as a sharded checkpoint does.
STORAGE_BYTES_PER_S = 2e12 / 16384
# Staging (async_save's copy of the state to host memory): PCIe Gen5 x16, one direction
# (calc.hardware.LINKS; pinned memory reaches most of it).
STAGING_BYTES_PER_S = hardware.LINKS["PCIe5-x16"].bytes_per_s
STATE_CONFIG = GPTConfig(n_layer=4, d_model=64, n_head=4, seq_len=32, vocab_size=128)


def lab_scale(cfg: GPTConfig = STATE_CONFIG, global_batch: int = 8) -> twin.Scale:
    """FULL_MODEL's FLOPs for FULL_TOKENS per step and its bytes (parameter ratio) for the lab
    model's step of ``global_batch`` sequences (``twin.Scale.model``)."""
    tiny = count_params(TinyGPT(cfg))
    per_token = twin.Scale.model(FULL_MODEL, tiny, cfg.n_layer, cfg.d_model, cfg.seq_len)
    tokens = FULL_TOKENS / (global_batch * cfg.seq_len)
    return twin.Scale(
        per_token.flops * tokens,
        per_token.bytes,
        f"{per_token.name}, x{tokens:.3g} tokens per step",
    )


def checkpoint_steps(
    ctx: Any, mode: str, steps: int = 6, save_after: int = 2, global_batch: int = 8
) -> dict:
    """``steps`` FSDP2 + AdamW steps of STATE_CONFIG with one checkpoint after step
    ``save_after``. sync: the rank waits for the write (state bytes / STORAGE_BYTES_PER_S, per
    rank: every rank writes its shard). async: it waits for the staging copy (bytes /
    STAGING_BYTES_PER_S) and the write runs in the background on the "io" stream, as
    dcp.async_save's thread does; the run's end waits for it. Returns this rank's state bytes
    (times the Scale's byte ratio) and losses."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    if mode not in ("sync", "async"):
        raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
    cfg = RunConfig(model=STATE_CONFIG, global_batch=global_batch)
    model, opt, _ = build(cfg)
    ((x, y),) = rank_batches(ctx, STATE_CONFIG, global_batch // ctx.world_size, 1)
    session = twin_session.current()
    scale = session.scale.bytes if session is not None else 1.0
    losses, nbytes = [], shard_bytes(*get_state_dict(model, opt)) * scale
    for step in range(steps):
        opt.zero_grad()
        loss = default_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step + 1 == save_after:
            if mode == "async":
                twin.io(nbytes / STAGING_BYTES_PER_S, "staging", nbytes)
            twin.io(nbytes / STORAGE_BYTES_PER_S, "write", nbytes, wait=mode == "sync")
        twin.step()
    return dict(bytes=nbytes, losses=losses)


def save_times(em: twin.Emulation, save_after: int = 2) -> dict[str, float]:
    """The slowest rank's emulated seconds: a step without a save, the stall the save added to
    its step, and from the save call until the checkpoint is complete (the write's end)."""
    steps = em.step_times()
    plain = [t for k, t in enumerate(steps) if k != save_after - 1]
    io = [s for s in em.spans if s["stream"] == "io"]
    start = min(s["start"] for s in io)
    return {
        "step": min(plain),
        "stall": steps[save_after - 1] - min(plain),
        "complete": max(s["end"] for s in io) - start,
    }


def straggler_steps(ctx: Any, steps: int = 4, global_batch: int = 8) -> list[float]:
    """``steps`` data-parallel steps (torch DDP, SGD) of STATE_CONFIG, each marked; returns this
    rank's losses. On a cluster with ``slow_ranks`` one GPU computes slower: every rank's step
    waits for it in the gradient all-reduce."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = TinyGPT(STATE_CONFIG, seed=0)
    batches = rank_batches(ctx, STATE_CONFIG, global_batch // ctx.world_size, steps, seed=2)
    return marked_sgd_steps(model, DDP(model, process_group=ctx.group), batches)


def per_rank_compute(em: twin.Emulation) -> list[list[float]]:
    """Emulated compute seconds of every rank (columns) in every marked step (rows)."""
    rows = []
    for k in range(len(em.records[0].steps)):
        row = []
        for rec in em.records:
            lo, hi = ([0.0] + rec.steps)[k], rec.steps[k]
            row.append(
                sum(
                    min(s["end"], hi) - max(s["start"], lo)
                    for s in rec.spans
                    if s["stream"] == "compute" and s["end"] > lo and s["start"] < hi
                )
            )
        rows.append(row)
    return rows
