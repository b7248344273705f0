"""The MoE layer (lab_utils.parallel.expert_parallel) against naive references in one process,
expert parallelism against the dense layer on 2 and 4 gloo ranks, our differentiable all-to-all
against torch's, EP x DP on a 2D DeviceMesh, and the load-balance / capacity experiment."""

import pytest
import torch

from lab_utils import run
from lab_utils.experiments import lab09
from lab_utils.experiments.lab09 import balance as lab09_balance
from lab_utils.parallel.expert_parallel import (
    MoELayer,
    all_to_all_rows,
    dispatch_and_combine,
    expert_capacity,
    load_balancing_loss,
    route,
)


# ------------------------------------------------------------------ one process
def naive_route(logits, k, cf):
    """Python loops: top-k by sorting each row, slots first choices first, then token order."""
    T, E = logits.shape
    probs = torch.softmax(logits, -1)
    capacity = expert_capacity(T, E, k, cf)
    chosen = [sorted(range(E), key=lambda e: -probs[t, e].item())[:k] for t in range(T)]
    load, keep = [0] * E, torch.zeros(T, k, dtype=torch.bool)
    for j in range(k):
        for t in range(T):
            e = chosen[t][j]
            keep[t, j] = load[e] < capacity
            load[e] += 1
    return torch.tensor(chosen), keep


@pytest.mark.parametrize("k, cf", [(1, 1.0), (2, 1.0), (2, 0.5), (3, 1.5), (2, None)])
def test_route_matches_naive_loops(k, cf):
    logits = torch.randn(20, 6, generator=torch.Generator().manual_seed(k)) + torch.arange(6.0)
    r = route(logits, k, cf)
    idx, keep = naive_route(logits, k, cf)
    assert torch.equal(r.expert_idx, idx) and torch.equal(r.keep, keep)
    assert torch.allclose(r.gate.sum(-1), torch.ones(20))  # renormalised over k
    raw = route(logits, k, cf, normalize=False).gate
    assert torch.allclose(raw, torch.softmax(logits, -1).gather(1, idx))
    if cf is None:
        assert r.keep.all()
    else:
        assert (torch.bincount(r.expert_idx[r.keep], minlength=6) <= r.capacity).all()


def test_load_balancing_loss_is_one_when_even_and_e_when_collapsed():
    E = 4
    even = load_balancing_loss(torch.full((8, E), 1 / E), torch.arange(8).view(8, 1) % E)
    collapsed = load_balancing_loss(torch.eye(E)[[0] * 8], torch.zeros(8, 1, dtype=torch.long))
    assert even.item() == pytest.approx(1.0) and collapsed.item() == pytest.approx(E)
    probs = torch.softmax(torch.randn(8, E, requires_grad=True), -1)
    load_balancing_loss(probs, probs.topk(2).indices).backward()  # gradient flows via P_e


def test_dense_layer_matches_a_per_token_loop_and_dispatch_and_combine():
    moe = MoELayer(d_model=6, d_hidden=10, n_experts=4, top_k=2, capacity_factor=1.0, seed=1)
    x = torch.randn(16, 6, generator=torch.Generator().manual_seed(0)) + 1.0
    out = moe(x, n_groups=2)
    r = out.routing
    assert (~r.keep).any(), "the test needs dropped assignments"
    loop = torch.stack(
        [
            sum(
                (
                    r.gate[t, j] * moe.experts[int(r.expert_idx[t, j])](x[t])
                    for j in range(2)
                    if r.keep[t, j]
                ),
                torch.zeros(6),
            )
            for t in range(16)
        ]
    )
    torch.testing.assert_close(out.y, loop, rtol=1e-6, atol=1e-6)

    def local_exchange(rows, counts):  # every expert in this process: no communication
        return torch.cat(
            [moe.experts[e](chunk) for e, chunk in enumerate(rows.split(counts.tolist()))]
        )

    for half in (slice(0, 8), slice(8, 16)):  # one capacity group each
        y = dispatch_and_combine(
            x[half], r.expert_idx[half], r.gate[half], r.keep[half], 4, local_exchange
        )
        torch.testing.assert_close(y, out.y[half], rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ on ranks
def test_expert_parallel_matches_dense_reference_at_2_and_4_ranks():
    res = run(lab09.ep_checks, 4, (2, 4), timeout_s=180, quiet=True, preload=("torch._dynamo",))
    assert "invalid tensor size" in res[0].uneven_all_gather  # gloo: no uneven all_gather
    assert all(r.uneven_all_to_all for r in res)  # but uneven all_to_all works
    for n in (2, 4):
        rows = [row for rank in res for row in rank.rows if row.ep == n]
        assert len(rows) == 4
        for row in rows:
            assert row.out_err <= 1e-6, row
            assert max(row.grad_err.values()) <= 1e-5, row
            assert row.a2a_calls == {"forward": 3, "backward": 2}
            assert row.bytes_uniform == (n - 1) / n * 24 * 2 * 16 * 4
        assert rows[0].dropped > 0 and len(set(rows[0].tokens_per_expert)) > 1  # uneven, drops
        # what leaves a rank in the dispatch comes back to it in the combine, over the group
        for block in range(4 // n):
            members = rows[block * n : (block + 1) * n]
            assert sum(r.bytes_splits["dispatch"] for r in members) == sum(
                r.bytes_splits["combine"] for r in members
            )
        # the ledger applies (n-1)/n to the whole send buffer: right for even splits only
        assert any(r.bytes_ledger["dispatch"] != r.bytes_splits["dispatch"] for r in rows)
        assert rows[0].bytes_ledger["counts"] == (n - 1) / n * 8 * 8  # E int64 counts
        # the wire (kernel-counted) is the splits' payload + 3 (n-1) gloo headers per all-to-all
        for r in rows:
            rows_payload = r.bytes_splits["dispatch"] + r.bytes_splits["combine"]
            assert (
                r.bytes_wire["forward"]
                == r.bytes_splits["counts"] + rows_payload + 3 * 3 * (n - 1) * 48
            )
            assert r.bytes_wire["backward"] == rows_payload + 2 * 3 * (n - 1) * 48


def _all_to_all_vs_torch(ctx):
    """Our autograd all-to-all and torch.distributed.nn's, uneven splits (some zero)."""
    from torch.distributed.nn.functional import all_to_all_single as torch_a2a

    r, n = ctx.rank, ctx.world_size
    send = [(r * 2 + j) % 3 for j in range(n)]
    recv = [(j * 2 + r) % 3 for j in range(n)]
    base = torch.randn(sum(send), 5, generator=torch.Generator().manual_seed(r))
    probe = torch.randn(sum(recv), 5, generator=torch.Generator().manual_seed(10 + r))
    ours_in, torch_in = base.clone().requires_grad_(True), base.clone().requires_grad_(True)
    ours = all_to_all_rows(ours_in, send, recv, ctx.group)
    theirs = torch_a2a(torch.empty(sum(recv), 5), torch_in, recv, send, group=ctx.group)
    (ours * probe).sum().backward()
    (theirs * probe).sum().backward()
    return (ours - theirs).abs().max().item(), (ours_in.grad - torch_in.grad).abs().max().item()


def test_all_to_all_rows_matches_torch_functional_forward_and_backward():
    for fwd, bwd in run(_all_to_all_vs_torch, 3, timeout_s=60, quiet=True):
        assert fwd == 0.0 and bwd == 0.0


def test_ep_times_dp_on_a_2d_mesh_trains_like_the_reference():
    res = run(lab09.ep_dp_mesh, 4, 2, 2, 3, timeout_s=180, quiet=True, preload=("torch._dynamo",))
    assert sorted((r.coords["dp"], r.coords["ep"]) for r in res) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in res:
        torch.testing.assert_close(
            torch.tensor(r.losses), torch.tensor(r.ref_losses), rtol=1e-5, atol=1e-6
        )
        assert r.param_err <= 1e-5
        assert r.comm["forward"]["ops"] == {"all_to_all": 3}
        assert r.comm["backward"]["ops"] == {"all_to_all": 2}
        for phase in ("experts over dp", "router over all"):
            assert set(r.comm[phase]["ops"]) == {"all_reduce"}
            assert r.comm[phase]["bytes"] == pytest.approx(r.formula[phase])
            headers = (r.comm[phase]["wire"] - r.formula[phase]) / 48  # gloo's framing
            assert headers == int(headers) and headers > 0


def test_balance_loss_evens_the_load_and_capacity_trades_drops_for_memory():
    res = run(
        lab09_balance.balance_run, 4, (0.0, 1.0), 12, (0.5, 1.0, 2.0), timeout_s=120, quiet=True
    )[0]

    def skew(coef):
        last = torch.tensor(res.tokens_per_expert[coef][-1], dtype=torch.float)
        return (last.max() / last.mean()).item()

    assert skew(1.0) < skew(0.0)
    assert res.aux_loss[1.0][-1] < res.aux_loss[0.0][-1]
    for coef in (0.0, 1.0):
        rows = [row for row in res.capacity if row["aux coef"] == coef]
        drops = [row["dropped %"] for row in rows]
        assert drops == sorted(drops, reverse=True)  # more capacity, fewer drops
        assert [row["padded buffer rows"] for row in rows] == [4 * 2 * row["C"] for row in rows]
        assert all(row["rows, busiest rank"] <= row["padded buffer rows"] for row in rows)
