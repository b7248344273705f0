"""Lab 06's drills and comparisons: PyTorch's DTensor TP beside ours, the dropout-seeding drill,
a SIMULATED slow link, and thin matmuls at large t. Each worker returns small dataclasses.

    compare_dtensor(ctx, cfg, steps)      ours vs parallelize_module (compose.apply_tp), 2 plans
    dropout_drill(ctx, cfg, steps)        seeding bugs that corrupt training silently, and the fix
    mlp_share_times(...)                  one rank's MLP share for growing t (one process)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils.data import token_batches
from lab_utils.experiments.lab06.tp import maxdiff
from lab_utils.experiments.unshard import unshard
from lab_utils.measure import CommLedger
from lab_utils.models import GPTConfig, TinyGPT, lm_loss
from lab_utils.parallel.compose import apply_tp
from lab_utils.parallel.tensor_parallel import (
    TPRandom,
    full_dropout_masks,
    replay_dropout_masks,
    seed_tensor_parallel,
    set_recording,
    tensor_parallelize,
)
from lab_utils.topology import Topology

# -- 4. ours vs parallelize_module ------------------------------------------------------------


@dataclass
class DTensorComparison:
    losses: dict[str, list[float]]  # per model, per step
    calls: dict[str, tuple[int, int]]  # per model: collectives (forward, backward) of a step
    weight_type: str  # what a DTensor plan's parameters are


def compare_dtensor(ctx: Any, cfg: GPTConfig, steps: int) -> DTensorComparison:
    """Unsharded, ours (tensor_parallelize) and DTensor with compose.apply_tp's plan (as is,
    and with the attention input replicated first), trained side by side on the same data."""
    tp_mesh = Topology(tp=ctx.world_size).build_mesh()["tp"]
    models = {
        "unsharded": TinyGPT(cfg, seed=0),
        "ours (tensor_parallelize)": tensor_parallelize(TinyGPT(cfg, seed=0), ctx.group),
        "DTensor, apply_tp": apply_tp(TinyGPT(cfg, seed=0), tp_mesh),
        "DTensor, apply_tp(replicate_attention_input)": apply_tp(
            TinyGPT(cfg, seed=0), tp_mesh, replicate_attention_input=True
        ),
    }
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-2) for k, m in models.items()}
    losses, calls = {k: [] for k in models}, {}
    for idx, tgt in token_batches(steps, 8, cfg.seq_len, cfg.vocab_size, seed=2):
        for k, m in models.items():
            opts[k].zero_grad()
            with CommLedger() as ledger:
                with ledger.phase("forward"):
                    loss = lm_loss(m(idx), tgt)
                with ledger.phase("backward"):
                    loss.backward()
            opts[k].step()
            losses[k].append(loss.item())
            calls[k] = (ledger.count(phase="forward"), ledger.count(phase="backward"))
    weight = models["DTensor, apply_tp"].blocks[0].attn.q.weight
    return DTensorComparison(losses, calls, type(weight).__name__)


# -- 5. the dropout drill ------------------------------------------------------------------------

DRILL_MODES = ("seed + rank (bug)", "same sharded seed (bug)", "TP seeding (fix)")


@dataclass
class DrillStep:
    loss: float  # this rank's loss
    ref: float  # the unsharded model's loss with the same masks
    grad_err: float  # max |grad - unsharded grad|
    spread: float  # max |logits - rank 0's logits| over the TP group


@dataclass
class DrillRun:
    steps: list[DrillStep]
    head_mask_agree: (
        float  # fraction of equal attention-dropout entries, rank 0's vs rank 1's heads
    )


def dropout_drill(ctx: Any, cfg: GPTConfig, steps: int) -> dict[str, DrillRun]:
    """Train a TP TinyGPT with dropout under each seeding, beside an unsharded copy that replays
    the masks the TP ranks drew (TP spans the whole world here)."""
    out = {}
    for mode in DRILL_MODES:
        rng = seed_tensor_parallel(7, ctx.group)  # replicated stream: the same seed everywhere
        if mode == "seed + rank (bug)":
            torch.manual_seed(7 + ctx.rank)  # the data-parallel habit
        if mode == "same sharded seed (bug)":
            rng = TPRandom(7, tp_rank=0)  # forgot the rank offset of the sharded stream
        model = tensor_parallelize(TinyGPT(cfg, seed=0), ctx.group, rng=rng)
        set_recording(model)  # keep each dropout's last mask
        ref = TinyGPT(cfg, seed=0)  # unsharded copy that replays those masks
        opt, ref_opt = (torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, ref))
        rows = []
        for idx, tgt in token_batches(steps, 8, cfg.seq_len, cfg.vocab_size, seed=3):
            opt.zero_grad()
            ref_opt.zero_grad()
            logits = model(idx)
            loss = lm_loss(logits, tgt)
            loss.backward()
            replay_dropout_masks(ref, full_dropout_masks(model, ctx.group))
            ref_loss = lm_loss(ref(idx), tgt)
            ref_loss.backward()
            grads = unshard(model, grads=True)
            every = [torch.empty_like(logits) for _ in range(ctx.world_size)]
            dist.all_gather(every, logits.detach(), group=ctx.group)
            rows.append(
                DrillStep(
                    loss.item(),
                    ref_loss.item(),
                    max(maxdiff(grads[n], p.grad) for n, p in ref.named_parameters()),
                    max(maxdiff(e, every[0]) for e in every),
                )
            )
            opt.step()
            ref_opt.step()
        mask = model.blocks[0].attn.attn_drop.last_mask.to(torch.uint8)
        masks = [torch.empty_like(mask) for _ in range(ctx.world_size)]
        dist.all_gather(masks, mask, group=ctx.group)
        out[mode] = DrillRun(rows, (masks[0] == masks[1]).float().mean().item())
    return out


def drill_rows(drill: list[dict[str, DrillRun]]) -> list[dict]:
    """Rows for show_table from both ranks' drill results."""
    rows = []
    for mode in DRILL_MODES:
        r0, r1 = drill[0][mode], drill[1][mode]
        rows.append(
            {
                "seeding": mode,
                "loss r0 first": r0.steps[0].loss,
                "loss r0 last": r0.steps[-1].loss,
                "loss r1 last": r1.steps[-1].loss,
                "max |logits r0 - r1|": max(s.spread for s in r0.steps),
                "max |loss - replay|": max(abs(s.loss - s.ref) for s in r0.steps),
                "max |grad err| step 0": r0.steps[0].grad_err,
                "head masks agree": r0.head_mask_agree,
            }
        )
    return rows


# -- 7. thin matmuls (one process) --------------------------------------------------------------


@dataclass
class ShareTiming:
    t: int
    seconds: float  # best CPU time of this thread
    gflops: float


def mlp_share_times(tokens: int, hid: int, ts: tuple[int, ...], repeats: int) -> list[ShareTiming]:
    """One rank's share of the Megatron MLP forward (fc slice -> GELU -> proj slice -> + bias,
    no communication) for each t, on ONE thread, best CPU time (time.thread_time: other
    processes on the machine cannot inflate it)."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x = torch.randn(tokens, hid)  # (b*s, h)
        out = []
        for t in ts:
            w_fc, b_fc = torch.randn(4 * hid // t, hid), torch.randn(4 * hid // t)  # column shard
            w_proj, b_proj = torch.randn(hid, 4 * hid // t), torch.randn(hid)  # row shard
            share = lambda: F.linear(F.gelu(F.linear(x, w_fc, b_fc)), w_proj) + b_proj  # noqa: E731
            share()  # warm-up
            best = float("inf")
            for _ in range(repeats):
                t0 = time.thread_time()
                share()
                best = min(best, time.thread_time() - t0)
            out.append(ShareTiming(t, best, 2 * 2 * tokens * hid * (4 * hid // t) / best / 1e9))
        return out
    finally:
        torch.set_num_threads(prev)
