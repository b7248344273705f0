"""Exercise "moe_dispatch" (lab 09): the dispatch permutation and the combine of an MoE layer.

The learner writes fn(x, expert_idx, gate, keep, n_experts, exchange) -> y:
  x (T, h) this rank's tokens; expert_idx, gate, keep (T, k) the router's choices, weights and
  the capacity mask; exchange(rows, counts) runs rows (R, h), sorted by expert with counts[e]
  rows for expert e, through the experts on whichever rank holds them (the two all-to-alls) and
  returns their outputs in the same order. y[t] = sum over kept slots j of
  gate[t, j] * expert_{expert_idx[t, j]}(x[t]); a token whose slots were all dropped gets 0.
The check runs on real ranks in two configurations (the whole world with 8 experts, top-2,
capacity 1.0, renormalised gates; and groups of 2 ranks with 4 experts, top-1, raw softmax
gates, capacity 1.5), compares y and the gradients of x and gate with a single-process
reference, and names the usual mistakes: outputs put back on the wrong rows, gates not
applied, dropped tokens not zeroed, rows not sorted by expert, the gate applied to the input.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from lab_utils.exercises._core import Exercise, Verdict, compare_tensors, first_problem, register
from lab_utils.parallel.expert_parallel import (
    dispatch_and_combine,
    expert_exchange,
    make_expert,
    make_router,
    route,
)

# name -> (d_model, d_hidden, n_experts, top_k, capacity factor, renormalise gates, T, group size,
#          experts at the end that odd ranks never route to: an uneven batch)
CONFIGS = {
    "world, E=8, top-2, cf=1.0": (8, 16, 8, 2, 1.0, True, 12, None, 0),
    "groups of 2, E=4, top-1 raw gates, cf=1.5, odd ranks route nothing to expert 3": (
        6,
        12,
        4,
        1,
        1.5,
        False,
        10,
        2,
        1,
    ),
}


def _inputs(d: int, E: int, k: int, cf: float, norm: bool, T: int, source: int, idle: int):
    g = torch.Generator().manual_seed(50 + source)
    x = 0.8 * torch.randn(d, generator=torch.Generator().manual_seed(9)) + torch.randn(
        T, d, generator=g
    )
    with torch.no_grad():
        logits = make_router(d, E, seed=3)(x)
        if source % 2:
            logits[:, E - idle :] = float("-inf")  # the last `idle` experts get no rows here
        r = route(logits, k, cf, normalize=norm)
    return x, r.expert_idx, r.gate, r.keep


def _dense(x, expert_idx, gate, keep, experts, use_gate=True):
    """The reference (or, use_gate=False, its gate-less variant): one process, every expert."""
    y = torch.zeros_like(x)
    for e, expert in enumerate(experts):
        sel = expert_idx == e
        token, slot = (sel & keep).nonzero(as_tuple=True)
        if token.numel():
            out = expert(x[token])
            y = y.index_add(0, token, gate[token, slot, None] * out if use_gate else out)
    return y


def _same_rows(got: torch.Tensor, want: torch.Tensor) -> bool:
    """The two (R, h) tensors hold the same rows, in any order."""
    if got.shape != want.shape:
        return False
    used = torch.zeros(want.shape[0], dtype=torch.bool)
    for row in got:
        close = ((want - row).abs().max(-1).values < 1e-5) & ~used
        if not close.any():
            return False
        used[close.nonzero()[0]] = True
    return True


def _dispatch_problem(sent, x, expert_idx, gate, keep) -> str | None:
    """What is wrong with the rows handed to exchange (``sent``: [(rows, counts)]), if anything."""
    if not sent:
        return "exchange was never called: the rows must go through it to reach their experts"
    rows = torch.cat([r for r, _ in sent])
    counts = torch.stack([c for _, c in sent]).sum(0)
    E = counts.numel()
    kept = torch.bincount(expert_idx[keep], minlength=E)
    if torch.equal(counts, torch.bincount(expert_idx.reshape(-1), minlength=E)) and not torch.equal(
        counts, kept
    ):
        return (
            "the dropped assignments (keep == False) were sent to their experts: tokens "
            "over an expert's capacity must not travel, and contribute 0"
        )
    if not torch.equal(counts, kept):
        return f"counts {counts.tolist()} are not the kept rows per expert {kept.tolist()}"
    start = 0
    for e in range(E):
        token, slot = ((expert_idx == e) & keep).nonzero(as_tuple=True)
        segment = rows[start : start + int(kept[e])]
        start += int(kept[e])
        if _same_rows(segment, x[token]):
            continue
        if _same_rows(segment, gate[token, slot, None] * x[token]):
            return (
                "the gate multiplied the expert's INPUT: experts are nonlinear, "
                "expert(g x) != g expert(x); weight the outputs"
            )
        return (
            f"the {int(kept[e])} rows at the place of expert {e} are not the tokens routed "
            "to it: sort the rows by expert id (counts[e] consecutive rows for expert e)"
        )
    return None


def _diagnose(y, sent, x, expert_idx, gate, keep, experts) -> str | None:
    want = _dense(x, expert_idx, gate, keep, experts)
    problem = compare_tensors(y, want, what="output y", rtol=1e-5, atol=1e-6)
    if problem is not None and (not isinstance(y, torch.Tensor) or y.shape != want.shape):
        return problem
    wrong_dispatch = _dispatch_problem(sent, x, expert_idx, gate, keep)
    if wrong_dispatch and problem is None:
        return f"y is right, but {wrong_dispatch}"
    if problem is None or wrong_dispatch:
        return wrong_dispatch
    y = y.detach()
    if torch.allclose(
        y, _dense(x, expert_idx, gate, keep, experts, use_gate=False), rtol=1e-5, atol=1e-6
    ):
        return (
            "every token got the plain SUM of its experts' outputs: the gate weights were "
            "not applied (multiply each returned row by its slot's gate)"
        )
    all_dropped = ~keep.any(1)
    if all_dropped.any() and y[all_dropped].abs().max() > 1e-6:
        return (
            f"{int(all_dropped.sum())} token(s) whose every slot was dropped got a non-zero "
            "output: dropped tokens must stay 0"
        )
    several = keep.sum(1) > 1
    ok = (y - want).abs().max(-1).values <= 1e-5
    if several.any() and ok[~several].all() and not ok[several].all():
        return (
            "tokens with ONE kept slot are right, tokens with several are not: did an "
            "indexed `y[idx] += v` keep only one of the repeated indices? (index_add sums them)"
        )
    return (
        f"the rows you sent are right, the combine is not ({problem}): each returned "
        "row must go back to the token its sent row came from (undo your permutation), "
        "weighted by that slot's gate[t, j] as given (not re-normalised)"
    )


def _one_config(ctx, fn, name: str) -> str | None:
    d, f, E, k, cf, norm, T, size, idle = CONFIGS[name]
    n = size or ctx.world_size
    if ctx.world_size % n:
        n = ctx.world_size
    group = None
    for start in range(0, ctx.world_size, n):  # every rank creates every block's group
        g = dist.new_group(list(range(start, start + n)))
        if start <= ctx.rank < start + n:
            group = g
    me = dist.get_rank(group)
    experts = torch.nn.ModuleList(make_expert(e, d, f, seed=3) for e in range(E))
    local = torch.nn.ModuleList(experts[e] for e in range(me * E // n, (me + 1) * E // n))
    x0, expert_idx, gate0, keep = _inputs(d, E, k, cf, norm, T, ctx.rank, idle)
    x, gate = x0.clone().requires_grad_(True), gate0.clone().requires_grad_(True)
    sent, short = [], []  # what the learner hands to exchange, for the diagnosis

    def exchange(rows, counts):
        if counts.numel() < E:  # pad, so the ranks' all-to-alls still match; reported below
            short.append(counts.numel())
            counts = torch.cat([counts, counts.new_zeros(E - counts.numel())])
        sent.append((rows.detach().clone(), counts.detach().clone()))
        return expert_exchange(rows, counts, local, group)

    y = fn(x, expert_idx.clone(), gate, keep.clone(), E, exchange)
    problem = _diagnose(y, sent, x0, expert_idx, gate0, keep, experts)
    if short:
        problem = (
            f"counts has {short[0]} entries for {E} experts: torch.bincount without "
            f"minlength=n_experts stops at the last expert that got rows (on this rank "
            f"expert {E - 1} got none); an uneven batch makes exchange fail, so pass "
            "minlength=n_experts"
        )
    probe = torch.randn(T, d, generator=torch.Generator().manual_seed(77 + ctx.rank))
    differentiable = torch.tensor(
        [float(isinstance(y, torch.Tensor) and y.requires_grad and y.shape == x.shape)]
    )
    dist.all_reduce(differentiable, op=dist.ReduceOp.MIN, group=group)  # all or none backward
    if differentiable.item():
        (y * probe).sum().backward()
    if problem is None:
        xr, gr = x0.clone().requires_grad_(True), gate0.clone().requires_grad_(True)
        (_dense(xr, expert_idx, gr, keep, experts) * probe).sum().backward()
        for what, got, want in (("x.grad", x.grad, xr.grad), ("gate.grad", gate.grad, gr.grad)):
            if got is None:
                problem = (
                    f"{what} is None: no gradient flows back through your y (detach(), "
                    ".data or torch.no_grad() cut the graph)"
                )
                break
            problem = compare_tensors(got, want, what=what, rtol=1e-4, atol=1e-5)
            if problem:
                break
    return problem


def check(ctx, fn) -> Verdict:
    for name in CONFIGS:
        problem = _one_config(ctx, fn, name)
        found = first_problem(problem, ctx.group)  # every rank stops, with the first cause
        if found:
            return Verdict.fail(f"[{name}] rank {found[0]}: {found[1]}")
    return Verdict.ok(
        f"outputs and gradients match the single-process MoE in both "
        f"configurations ({'; '.join(CONFIGS)}) on all {ctx.world_size} ranks"
    )


# ---- known-wrong answers (tests/test_exercises.py requires every one rejected) ---------------
def _plan(expert_idx, keep, sort=True, use_keep=True):
    T, k = expert_idx.shape
    token = torch.arange(T).repeat_interleave(k)
    expert = expert_idx.reshape(-1)
    kept = keep.reshape(-1).nonzero().squeeze(1) if use_keep else torch.arange(T * k)
    order = kept[torch.argsort(expert[kept], stable=True)] if sort else kept
    return token, expert, kept, order


def wrong_position(x, expert_idx, gate, keep, n_experts, exchange):
    token, expert, kept, order = _plan(expert_idx, keep)
    out = exchange(x[token[order]], torch.bincount(expert[order], minlength=n_experts))
    w = gate.reshape(-1)
    return torch.zeros_like(x).index_add(0, token[kept], w[kept, None] * out)  # unsorted rows


def wrong_no_gate(x, expert_idx, gate, keep, n_experts, exchange):
    token, expert, _, order = _plan(expert_idx, keep)
    out = exchange(x[token[order]], torch.bincount(expert[order], minlength=n_experts))
    return torch.zeros_like(x).index_add(0, token[order], out)


def wrong_dropped_not_zeroed(x, expert_idx, gate, keep, n_experts, exchange):
    token, expert, _, order = _plan(expert_idx, keep, use_keep=False)
    out = exchange(x[token[order]], torch.bincount(expert[order], minlength=n_experts))
    return torch.zeros_like(x).index_add(0, token[order], gate.reshape(-1)[order, None] * out)


def wrong_unsorted(x, expert_idx, gate, keep, n_experts, exchange):
    token, expert, _, order = _plan(expert_idx, keep, sort=False)
    out = exchange(x[token[order]], torch.bincount(expert[order], minlength=n_experts))
    return torch.zeros_like(x).index_add(0, token[order], gate.reshape(-1)[order, None] * out)


def wrong_gate_on_input(x, expert_idx, gate, keep, n_experts, exchange):
    token, expert, _, order = _plan(expert_idx, keep)
    w = gate.reshape(-1)[order, None]
    out = exchange(w * x[token[order]], torch.bincount(expert[order], minlength=n_experts))
    return torch.zeros_like(x).index_add(0, token[order], out)


register(
    Exercise(
        name="moe_dispatch",
        lab="09_moe",
        summary="the MoE dispatch permutation and the weighted combine around the all-to-alls",
        signature="fn(x (T, h), expert_idx (T, k), gate (T, k), keep (T, k) bool, n_experts, "
        "exchange) -> y (T, h); exchange(rows (R, h) sorted by expert, counts (E,)) -> "
        "(R, h) expert outputs in the same order",
        check=check,
        reference=dispatch_and_combine,
        wrong={
            "outputs returned to the wrong rows": wrong_position,
            "gate weights not applied": wrong_no_gate,
            "dropped tokens not zeroed": wrong_dropped_not_zeroed,
            "rows not sorted by expert": wrong_unsorted,
            "gate applied to the expert's input": wrong_gate_on_input,
        },
        world_size=4,
        timeout_s=60.0,
        hint="flatten the (token, slot) pairs; decide which of them travel and in what order "
        "(exchange's contract fixes the order); after the exchange, each returned row belongs "
        "to the token its sent row came from, weighted by that slot's gate",
    )
)
