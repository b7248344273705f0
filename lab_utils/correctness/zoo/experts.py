"""The MoE load-balancing loss, averaged per rank under expert parallelism (lab 14).

moe_aux_per_rank  The balance loss E * sum_e f_e P_e (f_e: share of the token-expert
                  assignments routed to e, no gradient; P_e: mean router probability of e)
                  computed over each rank's OWN tokens and averaged over ranks, as the course's
                  ExpertParallelMoE does (GShard's per-group balancing), where the reference
                  takes f and P over the GLOBAL batch (Qiu et al. 2025, "Demons in the Detail",
                  arXiv:2501.11873, on global-batch balancing). The fix all-reduces the E
                  expert counts (no gradient) and keeps each rank's probability sums as its
                  term of a Partial sum.

Real expert parallelism: 4 ranks each hold one of the E = 4 experts (ExpertParallelMoE, two
all-to-alls) and 8 of the 32 tokens; each expert's output and gradients are reassembled from its
owner (an EP layout: one rank), the router's from every rank. Capacity is off (no drops), so the
per-rank and the global routing are the same and only the balance loss can differ. The step's
objective: mean(y^2) + AUX_WEIGHT * balance loss.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist

from lab_utils.correctness.case import Case, RankEnv
from lab_utils.correctness.layout import Layout, Partial, Replicate, Shard, replicated
from lab_utils.correctness.recorder import Recorder
from lab_utils.correctness.zoo.model import WIDTH
from lab_utils.parallel.collectives import all_reduce_flat
from lab_utils.parallel.expert_parallel import ExpertParallelMoE, MoELayer

WORLD, E, TOP_K, HIDDEN, TOKENS, AUX_WEIGHT = 4, 4, 2, 16, 32, 0.1
EP = tuple(range(WORLD))


def moe_tokens() -> torch.Tensor:
    """(TOKENS, WIDTH) hidden states; each rank's quarter is shifted so that ranks route
    differently (per-rank balance then differs from the global one)."""
    x = torch.randn(TOKENS, WIDTH, generator=torch.Generator().manual_seed(3))
    return x + torch.arange(WORLD).repeat_interleave(TOKENS // WORLD)[:, None] * 0.5


def moe_reference(rec: Recorder) -> None:
    moe = MoELayer(WIDTH, HIDDEN, E, TOP_K, capacity_factor=None).double()
    rec.watch(moe, prefix="moe.")
    out = moe(moe_tokens().double())  # one group: f and P over the global batch
    rec.value("load_balancing_loss", out.aux_loss)
    loss = out.y.pow(2).mean() + AUX_WEIGHT * out.aux_loss
    rec.loss(loss)
    loss.backward()
    rec.grads(moe, prefix="moe.")


def moe_step(env: RankEnv, rec: Recorder, global_batch: bool) -> None:
    group = env.group((EP,))
    moe = ExpertParallelMoE(WIDTH, HIDDEN, E, TOP_K, capacity_factor=None, group=group)
    n_local = len(moe.experts)

    def rename(name: str) -> str:  # local expert j is global expert first_expert + j
        parts = name.split(".")
        if len(parts) > 2 and parts[1] == "experts":
            parts[2] = str(moe.first_expert + int(parts[2]))
        return ".".join(parts)

    def layout(name: str) -> Layout:  # an expert lives on one rank; tokens are split by rank
        parts = name.split(".")
        if len(parts) > 2 and parts[1] == "experts":
            return Layout((int(parts[2]) // n_local,), (Replicate(),))
        return Layout(EP, (Shard(0),))

    rec.watch(moe, layout, prefix="moe.", rename=rename)
    out = moe(moe_tokens().chunk(WORLD)[env.rank])
    if global_batch:
        counts = torch.bincount(out.routing.expert_idx.reshape(-1), minlength=E).float()
        dist.all_reduce(counts, group=group)  # f over the global batch: E floats, no gradient
        f = counts / (TOKENS * TOP_K)
        aux = E * (f * out.routing.probs.sum(0) / TOKENS).sum()  # my term of the global sum
        term, op, mse_share = Partial("sum"), dist.ReduceOp.SUM, 1 / WORLD
    else:
        aux = out.aux_loss  # the balance of MY tokens only
        term, op, mse_share = Partial("avg"), dist.ReduceOp.AVG, 1.0
    rec.value("load_balancing_loss", aux, Layout(EP, (term,)))
    loss = out.y.pow(2).mean() * mse_share + AUX_WEIGHT * aux
    rec.loss(loss, Layout(EP, (term,)))
    loss.backward()
    all_reduce_flat([p.grad for p in moe.router.parameters()], op, group)  # router: replicated
    if op == dist.ReduceOp.AVG:  # an expert's gradient already SUMS every rank's tokens (the
        for p in moe.experts.parameters():  # all-to-all's backward): the mean convention
            p.grad /= WORLD  # divides it by the ranks, as AVG does for the router
    rec.grads(
        moe,
        lambda n: layout(n) if ".experts." in n else replicated(EP),
        prefix="moe.",
        rename=rename,
    )


def cases() -> list[tuple[str, str, str, Case, Case]]:
    moe = partial(
        Case,
        world_size=WORLD,
        reduction_size=TOKENS + HIDDEN + 2 * WIDTH + WORLD,
        reference=moe_reference,
    )
    return [
        (
            "moe_aux_per_rank",
            "arXiv:2501.11873 (Qiu et al. 2025)",
            "value load_balancing_loss",
            moe(name="moe_aux_per_rank", step=partial(moe_step, global_batch=False)),
            moe(name="moe_aux_per_rank (fixed)", step=partial(moe_step, global_batch=True)),
        )
    ]
