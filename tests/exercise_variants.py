"""Learner-like versions of every exercise, beside the known-wrong ones each module registers.

WRONG[name]: (function, a phrase the grader's message must contain: its misconception, named).
RIGHT[name]: correct solutions written differently from the reference (they must pass).
MODULE_WRONG[name]: for each wrong version the exercise module registers, the phrase its
message must contain. tests/test_exercises.py runs them all, one launch per exercise.
Versions that raise or deadlock go in RAISING (their launch fails, so they run apart).
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils.exercises import fsdp_unit_hooks, loss_scaler, mesh_groups
from lab_utils.exercises.find_corrupt_rank import fingerprint
from lab_utils.experiments.lab11.faults import dp_step
from lab_utils.parallel.fsdp import UnitHooks
from lab_utils.parallel.tensor_parallel.comm import ReduceFromTP

AVG, SUM = dist.ReduceOp.AVG, dist.ReduceOp.SUM


# ------------------------------------------------------------------------------ zero1_step
def zero1_averages_twice(flat_param, flat_grad, shard, optimizer, group):
    grad_shard = torch.empty_like(shard)
    dist.reduce_scatter_single(grad_shard, flat_grad, op=AVG, group=group)
    shard.grad = grad_shard / dist.get_world_size(group)  # AVG already divided
    optimizer.step()
    dist.all_gather_single(flat_param, shard.detach(), group=group)


def zero1_never_zeroed(flat_param, flat_grad, shard, optimizer, group):
    grad_shard = torch.empty_like(shard)
    dist.reduce_scatter_single(grad_shard, flat_grad, op=AVG, group=group)
    shard.grad = grad_shard if shard.grad is None else shard.grad + grad_shard
    optimizer.step()
    dist.all_gather_single(flat_param, shard.detach(), group=group)


def zero1_step_before_grad(flat_param, flat_grad, shard, optimizer, group):
    grad_shard = torch.empty_like(shard)
    dist.reduce_scatter_single(grad_shard, flat_grad, op=AVG, group=group)
    optimizer.step()  # shard.grad is still None (or last step's)
    shard.grad = grad_shard
    dist.all_gather_single(flat_param, shard.detach(), group=group)


def zero1_gathers_grads(flat_param, flat_grad, shard, optimizer, group):
    grad_shard = torch.empty_like(shard)
    dist.reduce_scatter_single(grad_shard, flat_grad, op=AVG, group=group)
    shard.grad = grad_shard
    optimizer.step()
    dist.all_gather_single(flat_param, shard.grad, group=group)  # the gradient, not the shard


def zero1_gather_default_group(flat_param, flat_grad, shard, optimizer, group):
    grad_shard = torch.empty_like(shard)
    dist.reduce_scatter_single(grad_shard, flat_grad, op=AVG, group=group)
    shard.grad = grad_shard
    optimizer.step()
    dist.all_gather_single(flat_param, shard.detach())  # no group=group


def zero1_right_list_collectives(flat_param, flat_grad, shard, optimizer, group):
    """The list forms: reduce_scatter over chunks, all_gather into views of flat_param."""
    k = dist.get_world_size(group)
    grad_shard = torch.empty_like(shard)
    dist.reduce_scatter(grad_shard, list(flat_grad.chunk(k)), op=SUM, group=group)
    shard.grad = grad_shard.div_(k)
    optimizer.step()
    dist.all_gather(list(flat_param.chunk(k)), shard.detach().clone(), group=group)


def zero1_right_zero_grad_first(flat_param, flat_grad, shard, optimizer, group):
    """zero_grad, then accumulate into .grad like a backward would; the gather via a copy."""
    optimizer.zero_grad(set_to_none=False)
    if shard.grad is None:
        shard.grad = torch.zeros_like(shard)
    incoming = flat_grad / dist.get_world_size(group)
    out = torch.empty_like(shard)
    dist.reduce_scatter_single(out, incoming, group=group)
    shard.grad.add_(out)
    optimizer.step()
    gathered = torch.empty_like(flat_param)
    dist.all_gather_into_tensor(gathered, shard.detach(), group=group)
    flat_param.copy_(gathered)


# ------------------------------------------------------------------------- fsdp_unit_hooks
class FsdpGatherBf16(UnitHooks):
    @staticmethod
    def pre_forward(unit, group):  # hard-coded: right only with bf16 training
        fsdp_unit_hooks.gather(unit, group, torch.bfloat16)


class FsdpAsyncNoWait(UnitHooks):
    @staticmethod
    def pre_forward(unit, group):
        send = unit.local_shards(unit.param_dtype)
        recv = send.new_empty(unit.world * send.numel())
        work = dist.all_gather_single(recv, send, group=group, async_op=True)
        unit.unpack(recv)  # before work.wait()
        work.wait()


class FsdpAverageTwice(UnitHooks):
    @staticmethod
    def post_backward(unit, group):
        grads = unit.pack_grads(unit.reduce_dtype)
        mine = torch.empty(grads.numel() // unit.world, dtype=grads.dtype)
        dist.reduce_scatter_tensor(mine, grads, op=AVG, group=group)
        unit.accumulate_grads(mine / unit.world)  # AVG already divided
        unit.free()


class FsdpRightAsyncWaited(UnitHooks):
    @staticmethod
    def pre_forward(unit, group):
        send = unit.local_shards(unit.param_dtype)
        recv = send.new_empty(unit.world * send.numel())
        dist.all_gather_single(recv, send, group=group, async_op=True).wait()
        unit.unpack(recv)


class FsdpRightPreDivide(UnitHooks):
    @staticmethod
    def post_backward(unit, group):
        send = unit.pack_grads(unit.reduce_dtype).div_(unit.world)  # then SUM = the mean
        recv = torch.empty(send.numel() // unit.world, dtype=send.dtype)
        dist.reduce_scatter_tensor(recv, send, op=SUM, group=group)
        unit.accumulate_grads(recv)
        unit.free()


# ---------------------------------------------------------------------------- row_parallel
def row_averages_partials(x_local, weight_local, bias, group):
    partial = F.linear(x_local, weight_local)
    y = ReduceFromTP.apply(partial / dist.get_world_size(group), group)  # the DDP habit
    return y + bias


def row_bias_on_rank0(x_local, weight_local, bias, group):
    partial = F.linear(x_local, weight_local)
    if dist.get_rank(group) == 0:
        partial = partial + bias
    return ReduceFromTP.apply(partial, group)


class _SumThenIdentity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def row_right_own_function(x_local, weight_local, bias, group):
    return _SumThenIdentity.apply(x_local @ weight_local.t(), group) + bias


def row_right_bias_per_rank_share(x_local, weight_local, bias, group):
    """einsum for the partial product, the bias broadcast explicitly after the sum."""
    y = _SumThenIdentity.apply(torch.einsum("btc,nc->btn", x_local, weight_local), group)
    return y + bias.expand_as(y)


# --------------------------------------------------------------------------- moe_dispatch
def moe_bincount_no_minlength(x, expert_idx, gate, keep, n_experts, exchange):
    T, k = expert_idx.shape
    token = torch.arange(T).repeat_interleave(k)
    expert, weight = expert_idx.reshape(-1), gate.reshape(-1)
    kept = keep.reshape(-1).nonzero().squeeze(1)
    order = kept[torch.argsort(expert[kept], stable=True)]
    out = exchange(x[token[order]], torch.bincount(expert[order]))  # no minlength
    return torch.zeros_like(x).index_add(0, token[order], weight[order, None] * out)


def moe_right_loop(x, expert_idx, gate, keep, n_experts, exchange):
    """A loop over experts instead of argsort; the combine with index_add per slot."""
    rows, tokens, weights, counts = [], [], [], []
    for e in range(n_experts):
        t, s = ((expert_idx == e) & keep).nonzero(as_tuple=True)
        rows.append(x[t])
        tokens.append(t)
        weights.append(gate[t, s])
        counts.append(len(t))
    out = exchange(torch.cat(rows), torch.tensor(counts, dtype=torch.int64))
    tok, w = torch.cat(tokens), torch.cat(weights)
    return torch.zeros_like(x).index_add(0, tok, w[:, None] * out)


def moe_right_masked_gate(x, expert_idx, gate, keep, n_experts, exchange):
    """Zero the dropped slots' gates and let the counts come from one_hot sums."""
    T, k = expert_idx.shape
    flat_keep = keep.reshape(-1)
    token = torch.arange(T).repeat_interleave(k)[flat_keep]
    expert = expert_idx.reshape(-1)[flat_keep]
    w = (gate * keep).reshape(-1)[flat_keep]
    order = torch.sort(expert, stable=True).indices
    counts = F.one_hot(expert, n_experts).sum(0)
    out = exchange(x[token[order]], counts)
    y = torch.zeros_like(x)
    return y.index_add(0, token[order], w[order, None] * out)


# ---------------------------------------------------------------------------- loss_scaler
def scaler_true_on_skip(optimizer, state):
    loss_scaler.scaler_step(optimizer, state)
    return True  # "the step ran": but the optimizer did not step


def scaler_returns_none(optimizer, state):
    loss_scaler.scaler_step(optimizer, state)  # forgot to return the bool


def scaler_right_unscale_by_multiply(optimizer, state):
    """Multiply by the inverse scale, check finiteness with one torch.stack."""
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    if not torch.stack([p.grad.isfinite().all() for p in params]).all():
        state.scale = state.scale * state.backoff_factor
        state.good_steps = 0
        return False
    inv = 1.0 / state.scale
    torch._foreach_mul_([p.grad for p in params], inv)
    if state.max_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, state.max_norm)
    optimizer.step()
    state.good_steps = (state.good_steps + 1) % state.growth_interval
    if state.good_steps == 0:
        state.scale *= state.growth_factor
    return True


def scaler_right_gradscaler_math(optimizer, state):
    """Check for overflow via the sum of the gradients' norms (inf/NaN propagates)."""
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    total = sum(float(p.grad.float().abs().sum()) for p in params)
    if total != total or total == float("inf"):
        state.scale *= state.backoff_factor
        state.good_steps = 0
        return False
    for p in params:
        p.grad = p.grad / state.scale
    if state.max_norm:
        torch.nn.utils.clip_grad_norm_(params, state.max_norm)
    optimizer.step()
    state.good_steps += 1
    if state.good_steps >= state.growth_interval:
        state.scale, state.good_steps = state.scale * state.growth_factor, 0
    return True


# -------------------------------------------------------------------------- find_the_hang
def hang_every_local_batch(model, batches, group):
    for x, y in batches:  # the ranks hold different numbers of batches
        dp_step(model, x, y, group)
    return len(batches)


def ftH_right_all_gather_counts(model, batches, group):
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size(group))]
    dist.all_gather(counts, torch.tensor([len(batches)]), group=group)
    n = int(min(c.item() for c in counts))
    for i in range(n):
        dp_step(model, *batches[i], group)
    return n


def ftH_right_negated_max(model, batches, group):
    n = torch.tensor([-len(batches)], dtype=torch.float64)
    dist.all_reduce(n, op=dist.ReduceOp.MAX, group=group)  # max of -count = -min
    steps = int(-n.item())
    for x, y in batches[:steps]:
        dp_step(model, x, y, group)
    return steps


# ----------------------------------------------------------------------- ddp_bucket_hook
_READY: dict[int, set] = {}


def bucket_readiness_never_cleared(bucket, param):
    ready = _READY.setdefault(id(bucket), set())
    ready.add(id(param))
    bucket.grad_view(param).copy_(param.grad)
    if len(ready) == len(bucket.params):  # the set stays full after the first step
        bucket.buffer.div_(bucket.world_size)
        bucket.work = dist.all_reduce(bucket.buffer, group=bucket.group, async_op=True)


def bucket_right_readiness_set(bucket, param):
    ready = bucket.__dict__.setdefault("_ready", set())
    ready.add(id(param))
    bucket.grad_view(param).copy_(param.grad / bucket.world_size)
    if len(ready) == len(bucket.params):
        ready.clear()
        bucket.work = dist.all_reduce(bucket.buffer, group=bucket.group, async_op=True)


def bucket_right_avg_op(bucket, param):
    bucket.grad_view(param).copy_(param.grad)
    bucket.num_ready += 1
    if bucket.num_ready == len(bucket.params):
        bucket.work = dist.all_reduce(bucket.buffer, op=AVG, group=bucket.group, async_op=True)


# ------------------------------------------------------------------------------- naive_ddp
def naive_right_flat_buffer(model, group):
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=AVG, group=group)
    for g, part in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(part.view_as(g))


def naive_right_last_layer_first(model, group):
    """Backward's order (the last layer's gradients are ready first), a list of the grads."""
    grads = [p.grad for p in reversed(list(model.parameters())) if p.grad is not None]
    for g in grads:
        g.mul_(1.0 / dist.get_world_size(group))
        dist.all_reduce(g, group=group)


# ------------------------------------------------------------------------- ring_all_reduce
def _ring_right(tensor, group, step):
    """Both phases with blocking send/recv ordered by parity (no isend)."""
    n, r = dist.get_world_size(group), dist.get_rank(group)
    if n == 1:
        return tensor
    glob = (lambda i: dist.get_global_rank(group, i)) if group is not None else (lambda i: i)
    right, left = glob((r + step) % n), glob((r - step) % n)
    chunks = list(tensor.view(-1).tensor_split(n))

    def swap(send, recv):
        if r % 2 == 0:
            dist.send(send.contiguous(), right, group=group)
            dist.recv(recv, left, group=group)
        else:
            dist.recv(recv, left, group=group)
            dist.send(send.contiguous(), right, group=group)

    for s in range(n - 1):
        si, ri = (r - step * (s + 1)) % n, (r - step * (s + 2)) % n
        buf = torch.empty_like(chunks[ri])
        swap(chunks[si], buf)
        chunks[ri].add_(buf)
    for s in range(n - 1):
        si, ri = (r - step * s) % n, (r - step * (s + 1)) % n
        buf = torch.empty_like(chunks[ri])
        swap(chunks[si], buf)
        chunks[ri].copy_(buf)
    return tensor


def ring_right_blocking(tensor, group):
    return _ring_right(tensor, group, 1)


def ring_right_counter_clockwise(tensor, group):
    return _ring_right(tensor, group, -1)


# ---------------------------------------------------------------------------- state_ledger
def ledger_right_table(model, recipe):
    n = sum(p.numel() for p in model.parameters())
    table = {
        "fp32_adam": (4, 4, 0, 8),
        "fp32_sgd_momentum": (4, 4, 0, 4),
        "amp_adam": (4, 4, 0, 8),
        "mixed_adam": (2, 2, 4, 8),
        "bf16_adam": (2, 2, 0, 4),
    }
    return dict(zip(("params", "grads", "master", "optimizer"), (n * b for b in table[recipe])))


def ledger_right_by_tensor(model, recipe):
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    half = recipe in ("mixed_adam", "bf16_adam")
    w = 2 if half else 4
    moments = 1 if recipe.endswith("momentum") else 2
    return {
        "params": total * w,
        "grads": total * w,
        "master": total * 4 if recipe == "mixed_adam" else 0,
        "optimizer": total * moments * (4 if recipe == "mixed_adam" else w),
    }


# ----------------------------------------------------------------------------- mesh_groups
def _build(groups_of) -> dict:
    """Every rank creates the groups ``groups_of(axis)`` lists, in that order; keeps its own."""
    me, mine = dist.get_rank(), {}
    for axis in ("tp", "dp", "pp"):
        for ranks in groups_of(axis):
            g = dist.new_group(ranks)
            if me in ranks:
                mine[axis] = g
    return mine


def mesh_right_formula(dp, tp, pp):
    """Group the ranks by the coordinates they share, from the layout formula."""
    key = {
        "tp": lambda r: r // tp,
        "dp": lambda r: (r // (dp * tp), r % tp),
        "pp": lambda r: r % (dp * tp),
    }

    def groups_of(axis):
        members: dict = {}
        for r in range(dp * tp * pp):
            members.setdefault(key[axis](r), []).append(r)
        return list(members.values())  # insertion order: the same on every rank

    return _build(groups_of)


def mesh_right_via_helper_order(dp, tp, pp):
    return _build(lambda axis: [sorted(r) for r in mesh_groups.axis_groups(axis, dp, tp, pp)])


# --------------------------------------------------------------------- fit_serial_fraction
def fit_right_two_step(logs):
    """Median after the warm-up, then numpy's polyfit on 1/N."""
    import numpy as np

    xs = np.array([1 / log.n for log in logs])
    ts = np.array([float(np.median(log.step_s[1:])) for log in logs])
    b, a = np.polyfit(xs, ts, 1)
    return float(a / (a + b))


def fit_right_statistics(logs):
    import statistics

    xs = [1 / log.n for log in logs]
    ts = [statistics.median(log.step_s[1:]) for log in logs]
    slope, intercept = statistics.linear_regression(xs, ts)
    return intercept / (intercept + slope)


# ------------------------------------------------------------------------ find_corrupt_rank
def corrupt_right_gather_objects(output, group):
    prints = [None] * dist.get_world_size(group)
    dist.all_gather_object(prints, fingerprint(output), group=group)
    majority = Counter(prints).most_common(1)[0][0]
    return sorted(dist.get_global_rank(group, r) for r, p in enumerate(prints) if p != majority)


def corrupt_right_whole_tensors(output, group):
    n = dist.get_world_size(group)
    outs = [torch.empty_like(output) for _ in range(n)]
    dist.all_gather(outs, output.contiguous(), group=group)
    votes = [sum(torch.equal(o, q) for q in outs) for o in outs]
    best = max(votes)
    return sorted(dist.get_global_rank(group, r) for r, v in enumerate(votes) if v < best)


# --------------------------------------------------------------------------- onef1b_order
def onef1b_right_simulated(stage, p, m):
    """Build it from the queue: forwards until p - stage are in flight, then alternate."""
    order, f, b = [], 0, 0
    while b < m:
        if f < m and f - b < p - stage:
            order.append(f"F{f}")
            f += 1
        else:
            order.append(f"B{b}")
            b += 1
    return order


def onef1b_right_interleave(stage, p, m):
    w = min(p - stage - 1, m)
    fs, bs = [f"F{i}" for i in range(m)], [f"B{i}" for i in range(m)]
    steady = [x for pair in zip(fs[w:], bs) for x in pair]
    return fs[:w] + steady + bs[m - w :]


# ----------------------------------------------------------------------------- zb_h1_order
def zb_right_from_1f1b(stage, p, m):
    """1F1B's order, with each W_j placed right after B_(j + stage) (deferred by s)."""
    order = []
    for op in onef1b_right_simulated(stage, p, m):
        order.append(op)
        if op.startswith("B") and int(op[1:]) - stage >= 0:
            order.append(f"W{int(op[1:]) - stage}")
    done = {int(o[1:]) for o in order if o.startswith("W")}
    return order + [f"W{j}" for j in range(m) if j not in done]


def zb_right_rounds(stage, p, m):
    out = []
    for x in range(m + p - 1):
        out += [f"F{x}"] * (x < m)
        j = x - (p - 1 - stage)
        out += [f"B{j}"] * (0 <= j < m)
        out += [f"W{x - p + 1}"] * (0 <= x - p + 1 < m)
    return out


# ----------------------------------------------- learner-like mistakes in the five unprobed
def naive_reduces_weights(model, group):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.data, op=AVG, group=group)  # the weights, not the gradients


def naive_skips_frozen_by_requires_grad(model, group):
    for p in model.parameters():
        if p.requires_grad:  # an unused parameter also requires grad: its .grad is None
            dist.all_reduce(p.grad, op=AVG, group=group)


def ledger_master_in_optimizer(model, recipe):
    got = ledger_right_table(model, recipe)
    if recipe == "mixed_adam":
        got["optimizer"] += got["master"]
        got["master"] = 0
    return got


def ledger_fp32_grads_in_mixed(model, recipe):
    got = ledger_right_table(model, recipe)
    if recipe == "mixed_adam":
        got["grads"] *= 2  # "gradients are accumulated in fp32"
    return got


def ledger_bf16_with_master(model, recipe):
    got = ledger_right_table(model, recipe)
    if recipe == "bf16_adam":
        got["master"] = 2 * got["params"]
    return got


def mesh_own_groups_first(dp, tp, pp):
    me = dist.get_rank()  # my own group first: the order differs from rank to rank
    return _build(
        lambda axis: sorted(
            mesh_groups.axis_groups(axis, dp, tp, pp), key=lambda ranks: me not in ranks
        )
    )


def mesh_pp_consecutive(dp, tp, pp):
    world = dp * tp * pp  # "stages are neighbours": consecutive ranks
    return _build(
        lambda axis: (
            [list(range(i, i + pp)) for i in range(0, world, pp)]
            if axis == "pp"
            else mesh_groups.axis_groups(axis, dp, tp, pp)
        )
    )


def fit_first_step_only(logs):
    xs = [1 / log.n for log in logs]
    ts = [log.step_s[0] for log in logs]  # the first (warm-up) step of each run
    mx, mt = sum(xs) / len(xs), sum(ts) / len(ts)
    b = sum((x - mx) * (t - mt) for x, t in zip(xs, ts)) / sum((x - mx) ** 2 for x in xs)
    a = mt - b * mx
    return a / (a + b)


def fit_speedup_ratio(logs):
    """Amdahl solved from the first and last run's best steps, as if the first were N = 1."""
    first, last = logs[0], logs[-1]
    speedup = min(first.step_s) / min(last.step_s)
    n = last.n
    return (n / speedup - 1) / (n - 1)


def corrupt_norm_compare(output, group):
    n = dist.get_world_size(group)
    norms = torch.zeros(n, dtype=torch.float64)
    dist.all_gather_into_tensor(norms, output.double().norm().reshape(1), group=group)
    mid = norms.median()
    return sorted(
        dist.get_global_rank(group, r) for r in range(n) if not torch.isclose(norms[r], mid)
    )


# ------------------------------------------------------------ global_token_loss (lab 14)
def token_loss_local_count_times_n(logits, targets, mask, group):
    """Assumes every rank holds as many real tokens as this one."""
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    n = dist.get_world_size(group)
    return (ce * mask.flatten()).sum() / (mask.sum() * n) * n


def token_loss_right_avg_count(logits, targets, mask, group):
    """Divide by the AVERAGE count (an all-reduce with AVG): the group-size factor cancels."""
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    count = mask.sum().double().reshape(1)
    dist.all_reduce(count, op=AVG, group=group)
    return ce[mask.flatten()].sum() / count


def token_loss_right_ignore_index(logits, targets, mask, group):
    """Padding marked with ignore_index, summed by cross_entropy itself."""
    y = targets.masked_fill(~mask, -100).flatten()
    total = F.cross_entropy(logits.flatten(0, 1), y, ignore_index=-100, reduction="sum")
    count = torch.tensor([int(mask.sum())])
    dist.all_reduce(count, group=group)
    return total * dist.get_world_size(group) / count


# ------------------------------------------------------------- global_grad_clip (lab 14)
def clip_right_vector_norm(grads, max_norm, group):
    """torch.linalg.vector_norm of the concatenated shards, squared, summed over the group."""
    flat = torch.cat([g.flatten() for g in grads])
    sq = torch.linalg.vector_norm(flat).pow(2).reshape(1)
    dist.all_reduce(sq, op=SUM, group=group)
    total = sq.sqrt().item()
    for g in grads:
        g.mul_(min(1.0, max_norm / total))
    return total


def clip_right_torch_coef(grads, max_norm, group):
    """torch.nn.utils.clip_grad_norm_'s coefficient: max_norm / (total + 1e-6), clamped at 1."""
    sq = torch.stack([g.pow(2).sum() for g in grads]).sum().reshape(1)
    dist.all_reduce(sq, group=group)
    total = sq.sqrt()
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)
    return total.item()


def clip_max_of_norms(grads, max_norm, group):
    """The largest shard norm taken as the total (a MAX reduction)."""
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads)).reshape(1)
    dist.all_reduce(norm, op=dist.ReduceOp.MAX, group=group)
    for g in grads:
        g.mul_(min(1.0, max_norm / norm.item()))
    return norm.item()


# ------------------------------------------------------------------------- diagnose_trace
def diag_cause_only(ev):
    return "straggler"


def diag_many_all_reduces_is_the_bucket(ev):
    """Reads 'many all-reduces per step' as the problem (it is the healthy pattern)."""
    return (
        ("big_bucket", "all_reduces_per_step")
        if ev.all_reduces_per_step > 1
        else ("healthy", "gap_ms")
    )


def diag_item_as_straggler(ev):
    from lab_utils.exercises.diagnose_trace import diagnose

    cause, field = diagnose(ev)
    return ("straggler", "gap_cause") if cause == "host_sync" else (cause, field)


def diag_right_other_order(ev):
    """Bucket first, then loader, syncs, compiles; other evidence fields."""
    if ev.all_reduces_per_step <= 1:
        return "big_bucket", "overlap_fraction"
    if ev.loader_ms_per_step > 0:
        return "data_stall", "gap_cause"
    if ev.item_calls_per_step >= 10:
        return "host_sync", "item_calls_per_step"
    if ev.compiles_per_step > 0:
        return "recompile", "compiles_per_step"
    return "straggler", "compute_spread"


def diag_right_table(ev):
    """A table of (signal, cause, field), the first signal that fires wins."""
    table = [
        (ev.compiles_per_step > 0.5, "recompile", "compiles_per_step"),
        (ev.loader_ms_per_step > 1.0, "data_stall", "loader_ms_per_step"),
        (ev.item_calls_per_step > 2 * 1, "host_sync", "item_calls_per_step"),
        (ev.all_reduces_per_step < 2, "big_bucket", "exposed_ms"),
    ]
    return next(((c, f) for fired, c, f in table if fired), ("straggler", "slowest_rank"))


WRONG = {
    "zero1_step": [
        (zero1_averages_twice, "you average twice: ReduceOp.AVG already divides by the group"),
        (zero1_never_zeroed, "shard.grad was never zeroed"),
        (zero1_step_before_grad, "stepped before shard.grad was set"),
        (zero1_gathers_grads, "flat_param holds the averaged GRADIENT"),
    ],
    "fsdp_unit_hooks": [
        (FsdpGatherBf16, "the all-gather runs in bf16 while training is fp32"),
        (FsdpAsyncNoWait, "you unpacked an async all-gather without wait()"),
        (FsdpAverageTwice, "you average twice: op=AVG already divides by the group size"),
    ],
    "row_parallel": [
        (
            row_averages_partials,
            "averaging partials is a DDP habit: row-parallel partial sums are SUMMED",
        ),
        (row_bias_on_rank0, "the bias was added on one rank only, before the all-reduce"),
    ],
    "moe_dispatch": [(moe_bincount_no_minlength, "torch.bincount without minlength")],
    "loss_scaler": [
        (scaler_true_on_skip, "overflowed and was skipped, but your function returned True"),
        (scaler_returns_none, "returned None, not a bool"),
    ],
    "naive_ddp": [
        (naive_reduces_weights, "nothing reached p.grad"),
        (naive_skips_frozen_by_requires_grad, "some parameters have .grad None"),
    ],
    "state_ledger": [
        (ledger_master_in_optimizer, "the fp32 master copy is a bucket of its own"),
        (ledger_fp32_grads_in_mixed, "its weights and .grad are 2 B each"),
        (ledger_bf16_with_master, "this recipe keeps no master copy"),
    ],
    "mesh_groups": [
        (mesh_pp_consecutive, "that is its tp group"),
        (mesh_own_groups_first, "but not in the same order"),
    ],
    "fit_serial_fraction": [
        (fit_first_step_only, "You fitted the FIRST step of each run"),
        (fit_speedup_ratio, "T(1) is not measured"),
    ],
    "find_corrupt_rank": [(corrupt_norm_compare, "a tolerance (allclose, norms) hides")],
    "global_token_loss": [(token_loss_local_count_times_n, "per-rank mean")],
    "global_grad_clip": [(clip_max_of_norms, "sqrt(sum of g^2 over every shard")],
    "ddp_bucket_hook": [
        (
            bucket_readiness_never_cleared,
            "the readiness set (or count) is never cleared between steps",
        ),
    ],
}
RAISING = {
    "zero1_step": [(zero1_gather_default_group, "wrong group: ")],
    "diagnose_trace": [
        (diag_cause_only, "return (cause, evidence_field)"),
        (diag_many_all_reduces_is_the_bucket, "ONE rank is slow"),
        (diag_item_as_straggler, "the count is the evidence"),
    ],
    "find_the_hang": [
        (hang_every_local_batch, "a hang: your ranks ran different numbers of collectives"),
    ],
}
# What the message of each wrong version an exercise module registers must say.
MODULE_WRONG = {
    "ddp_bucket_hook": {
        "forgets to divide by world size": "they were SUMMED over the 4 ranks",
        "launches before the bucket is complete": "launched after 1 of its 2 gradients",
        "all-reduces a copy, not the bucket's buffer": "the all-reduce ran on a copy",
        "one blocking all-reduce per gradient": "the hook WAITED for its all-reduce",
        "waits for its all-reduce inside the hook (no overlap)": "the hook WAITED",
        "launches at the 2nd gradient (bucket size hard-coded)": "launched after 2 of its 4",
        "divides by the world size, not the group's": "the size of the WHOLE world",
    },
    "global_token_loss": {
        "per-rank mean": "per-rank mean",
        "global count without the group-size factor": "DDP's average divides by the group size",
        "padding counted": "the padding was counted",
    },
    "global_grad_clip": {
        "local norm": "this rank's own shard norm",
        "sum of norms": "Norms do not add",
        "average of squares": "ReduceOp.AVG divided by the group size",
        "rescales below max_norm": "clip only when the norm exceeds max_norm",
    },
    "find_corrupt_rank": {
        "rank 0 taken as the truth": "the reference value came from the corrupt rank",
        "compared with a tolerance": "a tolerance (allclose, norms) hides a flipped low-order bit",
        "positions in the group, not global ranks": "return GLOBAL ranks",
        "gathered over WORLD, not the group": "the comparison must use `group`, not WORLD",
    },
    "diagnose_trace": {
        "every idle gap is a straggler": "wait for input on all ranks alike",
        "exposed communication blamed on the network": "the communication is EXPOSED",
        "host syncs ignored": "the count is the evidence, not the time",
        "recompilation read as a data stall": "not for data",
        "the right cause with the longest gap as evidence": "gap_ms does not show it",
    },
    "find_the_hang": {
        "surplus batches stepped locally": "some update was not averaged over all ranks",
        "gradients summed, not averaged": "each step must AVERAGE the gradients over the group",
        "largest count, batches reused": "that is the LARGEST count",
        "step count agreed on the default group": "the count was agreed on the default group",
    },
    "fit_serial_fraction": {
        "mean of every step, warm-up included": "Leave step 0 out",
        "mean of the steady steps (not robust)": "a median (or the best step) does not",
        "two points, first log taken as N = 1": "T(1) is not measured",
        "a line in N instead of 1/N": "a straight line in 1/N, not in N",
    },
    "fsdp_unit_hooks": {
        "forgets to free the unit after its reduce-scatter": "post_backward must free the unit",
        "reduce-scatters with SUM (no average)": "the gradients were SUMMED over the 4 ranks",
        "all-gathers in fp32, casting afterwards": "every all-gather moved fp32",
        "reduce-scatters in bf16": "the reduce-scatter ran in bf16",
        "ignores the group it is given": "wrong group: ",
    },
    "loss_scaler": {
        "forgets to unscale before stepping": "never divided by the scale",
        "steps even when a gradient is inf/NaN": "A step with inf/NaN gradients was applied",
        "never grows the scale": "The scale never grows back",
        "does not restart the growth count after an overflow": "not restarted by an overflow",
        "divides by the scale twice": "divided by the scale twice",
        "clips before unscaling": "clipped while still scaled",
        "updates the scale before unscaling": "unscaled with the NEW scale",
    },
    "mesh_groups": {
        "tp outermost instead of innermost": "a tp group must be CONSECUTIVE ranks",
        "groups created only on their member ranks": "dist.new_group is a COLLECTIVE",
        "dp stride hard-coded to 2": "a hard-coded stride?",
        "dp and pp axes swapped": "that is its pp group (the two axes are swapped)",
    },
    "moe_dispatch": {
        "outputs returned to the wrong rows": "undo your permutation",
        "gate weights not applied": "the gate weights were not applied",
        "dropped tokens not zeroed": "the dropped assignments (keep == False) were sent",
        "rows not sorted by expert": "sort the rows by expert id",
        "gate applied to the expert's input": "the gate multiplied the expert's INPUT",
    },
    "naive_ddp": {
        "sums without averaging (N x too big an update)": "summed over the 4 ranks but not "
        "divided by 4",
        "divides by the world size, not the group's": "the size of the WHOLE world",
        "ignores the group argument": "the all-reduce ran on the default (whole-world) group",
        "crashes on a parameter without a gradient": "some parameters have .grad None",
        "gives unused/frozen parameters zero gradients": "took no part in this backward",
        "all-reduces a copy of the gradient": "every rank still holds its LOCAL gradient",
        "averages twice": "divided by 4 twice",
    },
    "onef1b_order": {
        "GPipe order (holds m micro-batches)": "GPipe holds all m = 8",
        "warm-up of `stage` forwards (deadlocks)": "DEADLOCK on real ranks",
        "no warm-up (no pipelining)": "check the warm-up count",
        "one warm-up forward too many (holds p - s + 1)": "held the activations of 5 micro",
        "warm-up without min(., m) (m < p)": "the warm-up is min(p - s - 1, m) forwards",
        "p = 4 hard-coded (holds too many at p = 2)": "p=2, m=5: gradients are right, but "
        "stage 0 held the activations of 4",
    },
    "ring_all_reduce": {
        "reduce-scatter phase only": "The all-gather phase is missing",
        "calls dist.all_reduce": "build the ring from send/recv (isend/irecv) only",
        "passes the whole tensor": "Sending whole tensors costs N/2 times more",
        "averages instead of sums": "you averaged, but this all-reduce SUMS",
        "returns a new tensor, input untouched": "but in a NEW tensor",
        "ignores the group argument": "the ring ignored `group`",
    },
    "row_parallel": {
        "forgets the all-reduce": "y is this rank's PARTIAL sum",
        "adds the bias on every rank before the all-reduce": "the bias was added on every rank "
        "BEFORE the all-reduce",
        "all-reduces the gradient in backward too": "g's backward is the identity",
        "all-reduces on the default group": "the all-reduce ran on the default (whole-world) group",
    },
    "state_ledger": {
        "Adam keeps one moment": "Adam keeps TWO moments",
        "mixed precision halves everything": "mixed precision does not halve the 16 B",
        "mixed precision without the master copy": "keeps an fp32 MASTER copy",
        "16-bit gradients under autocast": "their .grad is fp32 too",
        "fp32 moments for bf16 weights": "bf16 weights get bf16 moments",
        "SGD momentum counted like Adam": "ONE buffer per parameter",
        "tied weight counted twice": "count each parameter tensor once",
    },
    "zb_h1_order": {
        "W right after its B (1F1B's bubble)": "your order idles more",
        "every W at the end (holds all m micro-batches)": "deferring W costs memory",
        "cool-down B's newest first (neighbours swap gradients)": "matched in the order they "
        "were sent",
        "B trails F by `stage` (deadlocks)": "DEADLOCK on real ranks",
        "p = 4 hard-coded (holds too many at p = 2)": "p=2, m=5: gradients right, but stage 0 "
        "held the activations of 4",
    },
    "zero1_step": {
        "sums instead of averaging": "the gradients were SUMMED",
        "skips the all-gather (ranks diverge)": "the all-gather is missing",
        "updates with the local, unreduced gradient": "the gradients were not reduced over ranks",
        "all-reduce then slice (1.5x the bytes)": "the communication is not ZeRO-1's",
        "all-gathers before the update": "all-gather AFTER optimizer.step()",
        "divides by the world size, not the group's": "the size of the WHOLE world",
    },
}
RIGHT = {
    "zero1_step": [zero1_right_list_collectives, zero1_right_zero_grad_first],
    "fsdp_unit_hooks": [FsdpRightAsyncWaited, FsdpRightPreDivide],
    "row_parallel": [row_right_own_function, row_right_bias_per_rank_share],
    "moe_dispatch": [moe_right_loop, moe_right_masked_gate],
    "loss_scaler": [scaler_right_unscale_by_multiply, scaler_right_gradscaler_math],
    "diagnose_trace": [diag_right_other_order, diag_right_table],
    "find_the_hang": [ftH_right_all_gather_counts, ftH_right_negated_max],
    "ddp_bucket_hook": [bucket_right_readiness_set, bucket_right_avg_op],
    "naive_ddp": [naive_right_flat_buffer, naive_right_last_layer_first],
    "ring_all_reduce": [ring_right_blocking, ring_right_counter_clockwise],
    "state_ledger": [ledger_right_table, ledger_right_by_tensor],
    "mesh_groups": [mesh_right_formula, mesh_right_via_helper_order],
    "fit_serial_fraction": [fit_right_two_step, fit_right_statistics],
    "find_corrupt_rank": [corrupt_right_gather_objects, corrupt_right_whole_tensors],
    "global_token_loss": [token_loss_right_avg_count, token_loss_right_ignore_index],
    "global_grad_clip": [clip_right_vector_norm, clip_right_torch_coef],
    "onef1b_order": [onef1b_right_simulated, onef1b_right_interleave],
    "zb_h1_order": [zb_right_from_1f1b, zb_right_rounds],
}
__all__ = ["WRONG", "RAISING", "RIGHT", "MODULE_WRONG"]
