"""lab_utils.parallel.collectives on 4 real ranks (one launch): ring phases and parameter server vs
torch's collectives, and the bytes each rank sends vs the formulas, exactly."""

import functools

import torch
import torch.distributed as dist

from lab_utils import run
from lab_utils.calc import ring_bytes_per_rank


def _everything(ctx):
    from lab_utils.experiments import lab03
    from lab_utils.measure import CommLedger
    from lab_utils.parallel import collectives as C

    r = ctx.rank
    out = {"sums": [], "bytes": {}}
    for numel in (4096, 13, 4):
        x = torch.randn(numel, generator=torch.Generator().manual_seed(r * 7 + numel))
        want = x.clone()
        dist.all_reduce(want)
        for name in ("ring", "parameter_server"):
            got = x.clone()
            with CommLedger() as led:
                C.IMPLEMENTATIONS[name](got, None)
            out["sums"].append((name, numel, torch.allclose(got, want, atol=1e-5)))
            out["bytes"][(name, numel)] = (led.bytes_sent(), led.count("send"), led.count())
    # the two phases alone, on a subgroup of ranks {1, 2, 3} (global ranks != group ranks)
    sub = dist.new_group([1, 2, 3])
    if r in (1, 2, 3):
        x = torch.arange(12.0) * (r + 1)
        want = x.clone()
        dist.all_reduce(want, group=sub)
        got = x.clone()
        with CommLedger() as led:
            chunk = C.ring_reduce_scatter(got, sub)
            rs_sent = led.bytes_sent()
            C.ring_all_gather(got, sub)
        g = dist.get_rank(sub)
        out["sub"] = (
            torch.equal(chunk, want[4 * g : 4 * g + 4]),
            torch.equal(got, want),
            rs_sent,
            led.bytes_sent(),
        )
    out["hier"] = _hierarchical(C, ctx)
    out["before_after"] = lab03.collective_before_after(ctx)
    out["sweep"] = lab03.all_reduce_sweep(ctx, [16, 4096], [2, 4], repeats=1)
    return out


def _hierarchical(C, ctx):
    """2 nodes x 2 ranks: the phases' bytes (lab 03's experiment), the whole against
    dist.all_reduce on 13 elements (chunks of uneven size), and an impossible node size."""
    from lab_utils.experiments import lab03

    phases = lab03.hierarchical_bytes(ctx, 2)
    intra, inter = C.node_groups(2)
    odd = torch.arange(13.0) * (ctx.rank + 1)
    want = odd.clone()
    dist.all_reduce(want)
    try:
        C.node_groups(3)
        error = None
    except ValueError as exc:
        error = str(exc)
    return phases, torch.equal(C.hierarchical_all_reduce(odd, intra, inter), want), error


def test_hierarchical_all_reduce_sends_a_g_th_over_the_network():
    """Per rank: (G-1)/G D in each intra-node phase, 2(M-1)/M D/G across nodes (G = M = 2)."""
    res = _results()
    d = 4096 * 4
    for out in res:
        phases, equal, error = out["hier"]
        assert [
            phases[k]
            for k in ("intra-node reduce-scatter", "inter-node all-reduce", "intra-node all-gather")
        ] == [d / 2, 2 * (1 / 2) * d / 2, d / 2]
        assert phases["flat ring"] == 2 * 3 / 4 * d and phases["correct"] and equal
        assert "must divide the world size 4" in error


@functools.lru_cache(maxsize=1)
def _results():
    return run(_everything, 4, timeout_s=120, quiet=True)


def test_ring_and_parameter_server_match_torch_and_formulas():
    n = 4
    res = _results()
    for r, out in enumerate(res):
        assert all(ok for *_, ok in out["sums"]), out["sums"]
        sent, sends, calls = out["bytes"][("ring", 4096)]
        assert sent == ring_bytes_per_rank("all_reduce", n, 4096 * 4) == 2 * (n - 1) / n * 16384
        assert sends == 2 * (n - 1) and calls == 4 * (n - 1)  # + as many recvs
        ps_sent = out["bytes"][("parameter_server", 4096)][0]
        assert ps_sent == ((n - 1) * 16384 if r == 0 else 16384)  # the server's link carries N-1x
        for m in (2, 4):
            if r >= m:
                assert m not in out["sweep"]
                continue
            sw = out["sweep"][m]
            assert sw["sends"]["ring"] == 2 * (m - 1) and sw["sends"]["gloo"] == 0
            assert sw["bytes"]["ring"] == sw["bytes"]["gloo"] == 2 * (m - 1) / m * 4096
            assert sw["sends"]["parameter_server"] == (m - 1 if r == 0 else 1)
            assert (
                sw["phases"]["reduce_scatter"]
                == sw["phases"]["all_gather"]
                == ring_bytes_per_rank("all_gather", m, 4096)
                == (m - 1) / m * 4096
            )
            assert all(t > 0 for ts in sw["times"].values() for t in ts)
            assert all(len(ts) == 2 for ts in sw["times"].values())
        if r > 0:
            rs_ok, ar_ok, rs_sent, total = out["sub"]
            assert rs_ok and ar_ok
            assert rs_sent == ring_bytes_per_rank("reduce_scatter", 3, 48) == 32
            assert total == ring_bytes_per_rank("all_reduce", 3, 48)
    # what each rank holds: rank r starts with [10r, 10r+1, 10r+2, 10r+3]
    start = [[10 * r + j for j in range(n)] for r in range(n)]
    total = [sum(start[r][j] for r in range(n)) for j in range(n)]
    for r, out in enumerate(res):
        ba = out["before_after"]
        assert ba["all_reduce"]["after"] == total
        assert ba["reduce_scatter"]["after"] == [total[r]]
        assert ba["all_gather"]["before"] == [start[r][r]]
        assert ba["all_gather"]["after"] == [start[j][j] for j in range(n)]
        assert ba["broadcast"]["after"] == start[0]
        assert ba["reduce"]["after"] == (total if r == 0 else None)
        assert ba["all_to_all"]["after"] == [start[j][r] for j in range(n)]
