"""Collective volumes, alpha-beta times, busbw (nccl-tests) and per-step traffic (labs 03-07)."""

import math

import pytest

from lab_utils.calc import (
    alg_bandwidth,
    bus_bandwidth,
    busbw_factor,
    collective_time,
    dp_bytes_per_rank,
    fit_alpha_beta,
    hierarchical_time,
    pp_bytes_per_microbatch,
    ring_bytes_per_rank,
    tp_layer_comm,
)


def test_ring_bytes_per_rank():
    d = 1000.0
    assert ring_bytes_per_rank("all_reduce", 4, d) == 1500  # 2(N-1)/N D
    assert ring_bytes_per_rank("reduce_scatter", 4, d) == 750  # (N-1)/N D
    assert ring_bytes_per_rank("all_gather", 4, d) == 750
    assert ring_bytes_per_rank("all_to_all", 4, d) == 750
    assert ring_bytes_per_rank("broadcast", 4, d) == 1000
    assert ring_bytes_per_rank("send_recv", 2, d) == 1000
    assert ring_bytes_per_rank("all_reduce", 1, d) == 0
    # all-reduce = reduce-scatter + all-gather, and its volume approaches 2D, never more
    for n in (2, 8, 1024):
        ar = ring_bytes_per_rank("all_reduce", n, d)
        assert ar == ring_bytes_per_rank("reduce_scatter", n, d) + ring_bytes_per_rank(
            "all_gather", n, d
        )
        assert ar < 2 * d


def test_ring_latency_linear_tree_logarithmic():
    alpha = 1e-5
    ns = [2, 4, 8, 16, 64, 256, 1024]
    ring = [collective_time("all_reduce", n, 0, alpha, 1e9, "ring") for n in ns]
    tree = [collective_time("all_reduce", n, 0, alpha, 1e9, "tree") for n in ns]
    assert ring == pytest.approx([2 * (n - 1) * alpha for n in ns])  # linear in N
    assert tree == pytest.approx([2 * math.log2(n) * alpha for n in ns])  # log N
    assert ring[-1] / ring[0] == pytest.approx(1023)
    assert tree[-1] / tree[0] == pytest.approx(10)


def test_other_alpha_beta_models():
    a, bw, d, n = 1e-5, 1e9, 8e6, 8
    lg = 3
    assert collective_time("all_gather", n, d, a, bw, "tree") == pytest.approx(
        lg * a + 7 / 8 * d / bw
    )  # recursive doubling
    assert collective_time("reduce_scatter", n, d, a, bw, "ring") == pytest.approx(
        7 * a + 7 / 8 * d / bw
    )
    assert collective_time("broadcast", n, d, a, bw, "tree") == pytest.approx(lg * (a + d / bw))
    assert collective_time("all_to_all", n, d, a, bw, "tree") == pytest.approx(
        lg * a + lg / 2 * d / bw
    )  # Bruck
    assert collective_time("send_recv", 2, d, a, bw) == pytest.approx(a + d / bw)
    assert collective_time("all_reduce", 1, d, a, bw) == 0
    assert collective_time("all_reduce", 6, 0, a, bw, "tree") == pytest.approx(2 * 3 * a)


def test_ring_bandwidth_term_independent_of_n():
    d, bw = 1e9, 100e9
    times = [collective_time("all_reduce", n, d, 0.0, bw) for n in (2, 8, 64, 1024)]
    assert times[0] == pytest.approx(d / bw)  # 2(1)/2 = 1
    assert times[-1] == pytest.approx(2 * 1023 / 1024 * d / bw)
    assert max(times) < 2 * d / bw


def test_nccl_busbw_factors():
    # nccl-tests doc/PERFORMANCE.md "Summary".
    n = 8
    assert busbw_factor("all_reduce", n) == 2 * 7 / 8
    for op in ("reduce_scatter", "all_gather", "all_to_all"):
        assert busbw_factor(op, n) == 7 / 8
    for op in ("broadcast", "reduce"):
        assert busbw_factor(op, n) == 1
    assert bus_bandwidth("all_reduce", 8, 100e9) == pytest.approx(175e9)
    assert alg_bandwidth(1e9, 0.01) == 100e9


@pytest.mark.parametrize(
    "op", ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce"]
)
def test_busbw_of_ideal_ring_equals_link_speed(op):
    # That is the point of busbw: an ideal ring reads as the link speed whatever n is.
    d, link = 4e9, 50e9
    for n in (2, 8, 64):
        t = collective_time(op, n, d, 0.0, link, "ring")
        assert bus_bandwidth(op, n, alg_bandwidth(d, t)) == pytest.approx(link)


def test_dp_volumes_zero12_equal_ddp_zero3_is_1p5x():
    p, n = 14e9, 64
    ddp = dp_bytes_per_rank(p, n, "ddp")
    assert ddp == pytest.approx(2 * 63 / 64 * p)
    assert dp_bytes_per_rank(p, n, "zero1") == ddp  # NOT half of DDP
    assert dp_bytes_per_rank(p, n, "zero2") == ddp
    assert dp_bytes_per_rank(p, n, "zero3") == pytest.approx(1.5 * ddp)
    assert dp_bytes_per_rank(p, n, "fsdp") == dp_bytes_per_rank(p, n, "zero3")


def test_tp_layer_comm_gpt3():
    msg = 1 * 2048 * 12288 * 2
    tc = tp_layer_comm(1, 2048, 12288, 8)
    assert tc.ops == (("all_reduce", 4),) and tc.message_bytes == msg
    assert tc.bytes_per_rank == pytest.approx(4 * 2 * 7 / 8 * msg)
    fwd = tp_layer_comm(1, 2048, 12288, 8, backward=False)
    assert fwd.ops == (("all_reduce", 2),)
    sp = tp_layer_comm(1, 2048, 12288, 8, sequence_parallel=True)
    assert sp.ops == (("all_gather", 4), ("reduce_scatter", 4))
    assert sp.bytes_per_rank == tc.bytes_per_rank  # SP: same bytes, sharded activations
    assert tp_layer_comm(1, 2048, 12288, 8, recompute="full").ops == (("all_reduce", 6),)


def test_pp_bytes():
    assert pp_bytes_per_microbatch(2, 2048, 4096) == 2 * 2048 * 4096 * 2


def test_fit_alpha_beta_recovers_parameters():
    alpha, bw = 20e-6, 12.5e9
    sizes = [2**k for k in range(10, 30, 2)]
    fit = fit_alpha_beta(sizes, [alpha + s / bw for s in sizes])
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert fit.bandwidth == pytest.approx(bw, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    noisy = fit_alpha_beta([1, 2, 3, 4], [1.0, 2.2, 2.9, 4.1])
    assert 0.9 < noisy.r2 < 1.0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ring_bytes_per_rank("allreduce", 4, 1), "op must be one of"),
        (lambda: ring_bytes_per_rank("all_reduce", 0, 1), "n must be a whole number >= 1"),
        (lambda: collective_time("all_reduce", 4, 1, 0, 0), "bandwidth_bytes_per_s must be"),
        (lambda: collective_time("all_reduce", 4, 1, 0, 1, "butterfly"), "algorithm must be"),
        (lambda: alg_bandwidth(1, 0), "time_s must be a positive number"),
        (lambda: dp_bytes_per_rank(1, 4, "zero4"), "strategy must be one of"),
        (lambda: fit_alpha_beta([1, 2], [1]), "2 values but times_s has 1"),
        (lambda: fit_alpha_beta([1], [1]), "at least 2"),
        (lambda: fit_alpha_beta([5, 5], [1, 2]), "all message sizes are equal"),
        (lambda: fit_alpha_beta([1, 2], [1, -2]), "each time in times_s"),
    ],
)
def test_comm_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_hierarchical_all_reduce_time():
    """By hand: G = 8, M = 4, D = 8 GB; NVLink (1 us, 400 GB/s), network (10 us, 50 GB/s)."""
    g, m, d = 8, 4, 8e9
    rs = 7 * 1e-6 + 7 / 8 * d / 400e9
    across = 2 * 3 * 10e-6 + 2 * 3 / 4 * (d / 8) / 50e9
    got = hierarchical_time("all_reduce", g, m, d, 1e-6, 400e9, 10e-6, 50e9)
    assert got == pytest.approx(2 * rs + across, rel=1e-12)
    flat = collective_time("all_reduce", g * m, d, 10e-6, 50e9)
    assert flat / got > 3  # one flat ring crosses the network with every rank's bytes
    assert hierarchical_time("all_reduce", 1, m, d, 1e-6, 400e9, 10e-6, 50e9) == pytest.approx(
        collective_time("all_reduce", m, d, 10e-6, 50e9)
    )
    with pytest.raises(ValueError, match="per_node"):
        hierarchical_time("all_reduce", 0, m, d, 1e-6, 400e9, 10e-6, 50e9)
