"""Mixture of Experts from scratch, and expert parallelism with two all-to-alls (lab 09).

An MoE layer replaces one MLP by E small MLPs ("experts") and a router. For each token x (h,)
the router scores the experts, softmax(W_r x) -> p (E,), keeps the top k, and the layer returns
    y = sum over the k chosen experts e of  gate_e * expert_e(x)
so a token pays for k experts' FLOPs while the layer holds E experts' parameters: compute
follows the ACTIVE parameters, memory the TOTAL ones (Shazeer et al. 2017; GShard, Lepikhin
et al. 2020; Switch Transformer, Fedus et al. 2021).

Capacity (GShard Sec. 2.2, Switch Sec. 2.2): each expert takes at most
    C = ceil(capacity_factor * T * k / E)
of a group's T tokens; first choices are served before second choices, and the assignments
beyond C are DROPPED (they contribute 0; the residual connection around the layer carries the
token on). Fixed-shape implementations allocate (E, C, h) buffers, so memory grows with the
capacity factor. The load-balancing loss (Switch eq. 4) pushes the router towards even loads:
    aux = E * sum_e f_e * P_e,  f_e = share of the T*k assignments routed to e (a count, no
    gradient), P_e = mean router probability of e (differentiable); aux = 1 when balanced.

Expert parallelism over a group of `ep` ranks: rank r holds experts [r E/ep, (r+1) E/ep) and
its own tokens (the rest of the layer is data parallel). Per MoE layer and rank, with R rows =
the kept (token, expert) assignments of its T tokens (R <= T k), each of h values:
    0. all-to-all of the row COUNTS per expert, (E,) int64: every rank learns how many rows it
       will receive (uneven splits must be known before the data moves);
    1. dispatch all-to-all: the rows, sorted by expert, rows for rank s go to rank s;
    2. every rank runs its local experts on the rows it received;
    3. combine all-to-all: the outputs go back, in the same order, to the ranks they came from.
Bytes one rank sends per all-to-all: the rows it addresses to OTHER ranks, R_out * h * bytes;
with uniform routing and no drops, (ep-1)/ep * T k h bytes. Forward = 2 all-to-alls (+ the
counts), backward = 2 more (the gradients retrace both, in reverse). No reduction happens:
an all-to-all cannot be done as a ring of neighbours, every rank talks to every other rank.
(gloo has no uneven all_gather, but all_to_all_single with split sizes works: used here.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


@dataclass
class Routing:
    """The router's decisions for T tokens of one group (or several groups, concatenated)."""

    probs: torch.Tensor  # (T, E) softmax over all experts
    expert_idx: torch.Tensor  # (T, k) chosen experts, best first
    gate: torch.Tensor  # (T, k) the weights the expert outputs are multiplied by
    keep: torch.Tensor  # (T, k) bool: False = dropped (the expert was full)
    capacity: int  # C: slots per expert per group


def expert_capacity(
    n_tokens: int, n_experts: int, top_k: int, capacity_factor: float | None
) -> int:
    """C = ceil(capacity_factor * T * k / E); None = no limit ("dropless", C = T * k)."""
    if capacity_factor is None:
        return n_tokens * top_k
    return math.ceil(capacity_factor * n_tokens * top_k / n_experts)


def route(
    logits: torch.Tensor, top_k: int, capacity_factor: float | None = 1.0, normalize: bool = True
) -> Routing:
    """Top-k softmax routing with a capacity limit, for ONE group of T tokens.

    logits (T, E) -> probs; the k largest per token; gates renormalised over the k chosen
    (Mixtral; GShard top-2) or the raw probabilities (Switch top-1) if ``normalize=False``.
    Slots are assigned first choices first, then second choices, each in token order.
    """
    T, E = logits.shape
    probs = torch.softmax(logits.float(), dim=-1)  # (T, E)
    top_p, expert_idx = probs.topk(top_k, dim=-1)  # (T, k)
    gate = top_p / top_p.sum(-1, keepdim=True) if normalize else top_p
    capacity = expert_capacity(T, E, top_k, capacity_factor)
    onehot = F.one_hot(expert_idx.t().reshape(-1), E)  # (k*T, E), slot-major
    position = (onehot.cumsum(0) * onehot).sum(-1) - 1  # place in expert's queue
    keep = (position < capacity).view(top_k, T).t()  # (T, k)
    return Routing(probs, expert_idx, gate, keep, capacity)


def load_balancing_loss(probs: torch.Tensor, expert_idx: torch.Tensor) -> torch.Tensor:
    """Switch Transformer's auxiliary loss, E * sum_e f_e P_e (Fedus et al. 2021, eq. 4-6).

    f_e counts the assignments (before dropping) and carries no gradient; P_e does. Equals 1
    for a perfectly even router; with top-k (k distinct experts per token, so f_e <= 1/k) at
    most E/k, reached when the router concentrates on k experts (E only with top-1).
    """
    E = probs.shape[-1]
    f = torch.bincount(expert_idx.reshape(-1), minlength=E).float() / expert_idx.numel()
    return E * (f * probs.mean(0)).sum()


class Expert(nn.Module):
    """One expert: a small MLP h -> f -> h with GeLU (the transformer MLP, shrunk)."""

    def __init__(self, d_model: int, d_hidden: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, d_hidden), nn.Linear(d_hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (R, h) -> (R, h)
        return self.fc2(F.gelu(self.fc1(x)))


def make_expert(index: int, d_model: int, d_hidden: int, seed: int = 0) -> Expert:
    """Expert ``index`` initialised from its own seed: any rank can build any expert, so the
    experts of an EP rank equal the same-numbered experts of the dense reference."""
    with torch.random.fork_rng():
        torch.manual_seed(1000 * seed + index)
        return Expert(d_model, d_hidden)


def make_router(d_model: int, n_experts: int, seed: int = 0) -> nn.Linear:
    with torch.random.fork_rng():
        torch.manual_seed(1000 * seed + 999)
        return nn.Linear(d_model, n_experts, bias=False)


@dataclass
class MoEOutput:
    y: torch.Tensor  # (T, h)
    aux_loss: torch.Tensor  # () load-balancing loss, mean over groups
    routing: Routing


def _route_groups(
    router: nn.Linear, x: torch.Tensor, n_groups: int, top_k: int, capacity_factor: float | None
) -> tuple[Routing, torch.Tensor]:
    """Route each of n_groups equal chunks of x on its own (its own capacity), concatenated."""
    parts = [route(router(xg), top_k, capacity_factor) for xg in x.chunk(n_groups)]
    aux = torch.stack([load_balancing_loss(p.probs, p.expert_idx) for p in parts]).mean()
    cat = lambda f: torch.cat([getattr(p, f) for p in parts])  # noqa: E731
    return Routing(
        cat("probs"), cat("expert_idx"), cat("gate"), cat("keep"), parts[0].capacity
    ), aux


class MoELayer(nn.Module):
    """The single-process reference: router + all E experts, no communication.

    ``forward(x, n_groups)`` routes each of n_groups chunks of x separately (GShard's groups:
    under EP a group is one rank's tokens), then loops over experts: each gathers its kept
    tokens, runs, and adds gate * output back at the tokens' rows.
    """

    def __init__(
        self,
        d_model: int,
        d_hidden: int,
        n_experts: int,
        top_k: int = 2,
        capacity_factor: float | None = 1.0,
        seed: int = 0,
    ):
        super().__init__()
        self.top_k, self.capacity_factor = top_k, capacity_factor
        self.router = make_router(d_model, n_experts, seed)
        self.experts = nn.ModuleList(
            make_expert(e, d_model, d_hidden, seed) for e in range(n_experts)
        )

    def forward(self, x: torch.Tensor, n_groups: int = 1) -> MoEOutput:  # x (T, h)
        routing, aux = _route_groups(self.router, x, n_groups, self.top_k, self.capacity_factor)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = ((routing.expert_idx == e) & routing.keep).nonzero(as_tuple=True)
            if token.numel():
                y = y.index_add(0, token, routing.gate[token, slot, None] * expert(x[token]))
        return MoEOutput(y, aux, routing)


# ------------------------------------------------------------------ expert parallelism
class _AllToAll(torch.autograd.Function):
    """all_to_all_single with uneven splits along dim 0, differentiable: the gradient goes back
    through the mirror all-to-all (send and receive split sizes swapped)."""

    @staticmethod
    def forward(ctx, rows, send_splits, recv_splits, group):  # rows (sum(send_splits), h)
        out = rows.new_empty((sum(recv_splits), *rows.shape[1:]))
        dist.all_to_all_single(out, rows.contiguous(), recv_splits, send_splits, group=group)
        ctx.splits, ctx.group = (send_splits, recv_splits), group
        return out  # (sum(recv_splits), h)

    @staticmethod
    def backward(ctx, grad_out):
        send_splits, recv_splits = ctx.splits
        grad_in = grad_out.new_empty((sum(send_splits), *grad_out.shape[1:]))
        dist.all_to_all_single(
            grad_in, grad_out.contiguous(), send_splits, recv_splits, group=ctx.group
        )
        return grad_in, None, None, None


def all_to_all_rows(
    rows: torch.Tensor, send_splits: list[int], recv_splits: list[int], group
) -> torch.Tensor:
    """Rank r sends rows[its s-th chunk] to rank s; returns what it received, by source rank."""
    return _AllToAll.apply(rows, send_splits, recv_splits, group)


def expert_exchange(
    rows: torch.Tensor, counts: torch.Tensor, experts: nn.ModuleList, group
) -> torch.Tensor:
    """Steps 0-3 of expert parallelism for rows already sorted by global expert id.

    rows (R, h): counts[e] rows for expert e, in expert order; counts (E,) int64. ``experts``
    are this rank's E/ep experts. Returns (R, h): each row's expert output, in the same order.
    Communication: all-to-all of E int64 counts, then two all-to-alls of rows (uneven splits).
    """
    ep, n_local = dist.get_world_size(group), len(experts)
    if counts.numel() != ep * n_local or int(counts.sum()) != rows.shape[0]:
        raise ValueError(
            f"counts must have E = {ep} ranks x {n_local} experts entries summing "
            f"to the {rows.shape[0]} rows; got {counts.tolist()}"
        )
    recv_counts = torch.empty_like(counts)  # (ep * n_local,): [source][expert]
    dist.all_to_all_single(recv_counts, counts, group=group)  # 0. how many rows will arrive
    send_splits = counts.view(ep, n_local).sum(1).tolist()  # rows for each destination rank
    recv_splits = recv_counts.view(ep, n_local).sum(1).tolist()
    received = all_to_all_rows(rows, send_splits, recv_splits, group)  # 1. dispatch
    pieces = list(received.split(recv_counts.tolist()))  # one piece per (source, expert)
    for j, expert in enumerate(experts):  # 2. each local expert, one matmul
        mine = [s * n_local + j for s in range(ep)]
        out = expert(torch.cat([pieces[i] for i in mine]))
        for i, piece in zip(mine, out.split([pieces[i].shape[0] for i in mine])):
            pieces[i] = piece
    return all_to_all_rows(torch.cat(pieces), recv_splits, send_splits, group)  # 3. combine


def dispatch_and_combine(
    x: torch.Tensor,
    expert_idx: torch.Tensor,
    gate: torch.Tensor,
    keep: torch.Tensor,
    n_experts: int,
    exchange: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """The local half of an MoE layer: the dispatch permutation and the weighted combine.

    x (T, h); expert_idx, gate, keep (T, k). ``exchange(rows, counts)`` runs each row through
    its expert (wherever that expert lives) and returns the outputs in the order it got them.
    """
    T, k = expert_idx.shape
    token = torch.arange(T, device=x.device).repeat_interleave(k)  # (T*k,) token of each slot
    expert, weight = expert_idx.reshape(-1), gate.reshape(-1)  # (T*k,)
    kept = keep.reshape(-1).nonzero().squeeze(1)  # dropped slots never travel
    order = kept[torch.argsort(expert[kept], stable=True)]  # sorted by expert: (R,)
    counts = torch.bincount(expert[order], minlength=n_experts)  # (E,) rows per expert
    out = exchange(x[token[order]], counts)  # (R, h), same order
    y = torch.zeros_like(x)  # dropped tokens: 0
    return y.index_add(0, token[order], weight[order, None] * out)  # back to their rows


class ExpertParallelMoE(nn.Module):
    """The MoE layer with its experts sharded over ``group``: rank r holds experts
    [r E/ep, (r+1) E/ep), built exactly as ``MoELayer``'s; the router is replicated (its
    gradient must be averaged or summed over the data-parallel ranks, as any dense weight)."""

    def __init__(
        self,
        d_model: int,
        d_hidden: int,
        n_experts: int,
        top_k: int = 2,
        capacity_factor: float | None = 1.0,
        group=None,
        seed: int = 0,
    ):
        super().__init__()
        ep, r = dist.get_world_size(group), dist.get_rank(group)
        if n_experts % ep:
            raise ValueError(f"n_experts={n_experts} must be divisible by the {ep} EP ranks")
        n_local = n_experts // ep
        self.group, self.n_experts = group, n_experts
        self.top_k, self.capacity_factor = top_k, capacity_factor
        self.first_expert = r * n_local
        self.router = make_router(d_model, n_experts, seed)
        self.experts = nn.ModuleList(
            make_expert(self.first_expert + j, d_model, d_hidden, seed) for j in range(n_local)
        )

    def forward(self, x: torch.Tensor) -> MoEOutput:  # x (T, h): this rank's tokens
        routing, aux = _route_groups(self.router, x, 1, self.top_k, self.capacity_factor)
        exchange = lambda rows, counts: expert_exchange(
            rows,
            counts,
            self.experts,  # noqa: E731
            self.group,
        )
        y = dispatch_and_combine(
            x, routing.expert_idx, routing.gate, routing.keep, self.n_experts, exchange
        )
        return MoEOutput(y, aux, routing)
