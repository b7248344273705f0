"""Lab 04, section 8b: synchronise less often. Local SGD and DiLoCo against every-step
all-reduce on the same data: held-out loss after each sync and the bytes each rank sent.

    low_communication(ctx, cfg, batch_per_rank, steps, every)   rank worker, one launch
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from lab_utils.data import token_batches
from lab_utils.experiments.common import rank_batches
from lab_utils.measure import CommLedger
from lab_utils.models import GPTConfig, TinyGPT
from lab_utils.parallel.collectives import all_reduce_flat
from lab_utils.parallel.local_sgd import DiLoCo
from lab_utils.reference import default_loss

METHODS = {  # name -> (outer lr, outer momentum); None: all-reduce the gradients every step
    "all-reduce every step": None,
    "local SGD": (1.0, 0.0),
    "DiLoCo (Nesterov 0.7, 0.9)": (0.7, 0.9),
}


@dataclass
class LowComm:
    held_out: list[float]  # loss on a held-out batch after every `every` steps (all ranks equal)
    bytes_sent: float  # by this rank over the whole run (CommLedger: what was called)


def low_communication(
    ctx: Any, cfg: GPTConfig, batch_per_rank: int, steps: int, every: int, lr: float = 3e-3
) -> dict[str, LowComm]:
    """Each method trains TinyGPT(seed 0) with AdamW for ``steps`` steps on the same global
    batches (this rank's shard), syncing every step or every ``every`` steps."""
    shards = rank_batches(ctx, cfg, batch_per_rank, steps)  # this rank's share of each batch
    held_x, held_y = token_batches(1, 16, cfg.seq_len, cfg.vocab_size, seed=99)[0]
    out = {}
    for name, outer in METHODS.items():
        model = TinyGPT(cfg, seed=0)
        inner = torch.optim.AdamW(model.parameters(), lr=lr)
        algo = None if outer is None else DiLoCo(model, inner, every, *outer, group=ctx.group)
        curve = []
        with CommLedger() as ledger:
            for i, (x, y) in enumerate(shards):
                default_loss(model(x), y).backward()
                if algo is None:
                    grads = [p.grad for p in model.parameters()]
                    all_reduce_flat(grads, dist.ReduceOp.AVG, ctx.group)
                    inner.step()
                    inner.zero_grad()
                else:
                    algo.step()
                if (i + 1) % every == 0:
                    with torch.no_grad():
                        curve.append(default_loss(model(held_x), held_y).item())
        out[name] = LowComm(curve, ledger.bytes_sent())
    return out
