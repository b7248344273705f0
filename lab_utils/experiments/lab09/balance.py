"""Lab 09's load-balance experiment: the router trained with and without the auxiliary loss.

    balance_run(ctx, aux_coefs, steps, capacity_factors)
        train with and without the load-balancing loss; tokens per expert per step; dropped
        tokens and buffer sizes per capacity factor

Expert parallelism over the whole world (``lab_utils.parallel.expert_parallel``); the shapes and
the synthetic tokens are lab 09's (``shape.py``: ``MoEShape``, ``tokens_for``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from lab_utils.experiments.lab09.shape import MoEShape, teacher, tokens_for
from lab_utils.parallel.expert_parallel import ExpertParallelMoE, expert_capacity


@dataclass
class BalanceResult:
    tokens_per_expert: dict[float, list[list[int]]]  # aux coef -> per step, (E,) whole world
    aux_loss: dict[float, list[float]]  # aux coef -> per step, mean over ranks
    capacity: list[dict]  # rows: coef, capacity factor, dropped...


def balance_run(
    ctx,
    aux_coefs: tuple[float, ...] = (0.0, 1.0),
    steps: int = 30,
    capacity_factors: tuple[float, ...] = (0.5, 1.0, 1.25, 1.5, 2.0),
    lr: float = 0.2,
    shape: MoEShape = MoEShape(tokens=64, skew=1.0),
) -> BalanceResult:
    """EP over the world: train a router + experts for ``steps`` SGD steps (regression to a
    fixed nonlinear target) with loss = mse + coef * aux, once per coefficient, counting the
    assignments each expert gets. Then, for the trained router, sweep the capacity factor:
    assignments dropped, rows the busiest rank receives, and the (E, C, h) buffer a
    fixed-shape implementation would allocate."""
    n, E, k = ctx.world_size, shape.n_experts, shape.top_k
    A = teacher(shape)
    per_step, aux_hist, cap_rows = {}, {}, []
    for coef in aux_coefs:
        moe = ExpertParallelMoE(
            shape.d_model, shape.d_hidden, E, k, None, group=ctx.group, seed=shape.seed
        )  # dropless while training: counts are loads
        per_step[coef], aux_hist[coef] = [], []
        for step in range(steps):
            x = tokens_for(shape, ctx.rank, step)
            out = moe(x)
            mse = ((out.y - torch.tanh(x @ A) / 2) ** 2).sum() / (n * shape.tokens)
            moe.zero_grad()
            (mse + coef * out.aux_loss / n).backward()
            dist.all_reduce(moe.router.weight.grad, group=ctx.group)
            with torch.no_grad():
                for p in moe.parameters():
                    p -= lr * p.grad
            stats = torch.cat(
                [
                    torch.bincount(out.routing.expert_idx.reshape(-1), minlength=E).float(),
                    out.aux_loss.detach().view(1) / n,
                ]
            )
            dist.all_reduce(stats, group=ctx.group)  # measurement, outside the ledger
            per_step[coef].append([int(c) for c in stats[:E].tolist()])
            aux_hist[coef].append(stats[E].item())
        x = tokens_for(shape, ctx.rank, steps)
        for cf in capacity_factors:
            moe.capacity_factor = cf
            with torch.no_grad():
                r = moe(x).routing
            kept = torch.bincount(r.expert_idx[r.keep], minlength=E).float()
            dropped = torch.tensor([float((~r.keep).sum())])
            dist.all_reduce(kept, group=ctx.group)
            dist.all_reduce(dropped, group=ctx.group)
            per_rank = kept.view(n, E // n).sum(1)  # rows each rank's experts get
            C = expert_capacity(shape.tokens, E, k, cf)
            cap_rows.append(
                {
                    "aux coef": coef,
                    "capacity factor": cf,
                    "C": C,
                    "dropped %": 100 * dropped.item() / (n * shape.tokens * k),
                    "rows, busiest rank": int(per_rank.max()),
                    "rows, mean rank": per_rank.mean().item(),
                    "padded buffer rows": n * (E // n) * C,
                }
            )  # ep sources x local experts x C
    return BalanceResult(per_step, aux_hist, cap_rows)
