"""The labs' timing lessons on the emulated cluster (lab_utils.twin), asserted on the EMULATED
clock (deterministic: the virtual clock never reads this machine's time).

Lab 03: all-reduce times fit alpha-beta (r^2 >= 0.99), the fitted slope's busbw is the link's
bandwidth, and across nodes the hierarchical all-reduce beats one flat ring as calc says.
Lab 05: FSDP's prefetch hides all-gathers under compute (ours and torch's fully_shard, equal
times), and ZeRO-3's extra all-gather costs far less step time than traffic; one FSDP step unit
by unit: each prefetched gather starts while the block before it computes, the full weights held
at the peak equal the calculator's.
Lab 04: the bucket-size sweep of BucketDDP and torch DDP has a sweet spot strictly inside it.
Lab 10: strong scaling follows Amdahl (the serial part: the all-reduce tail, larger across nodes),
weak scaling stays near N and just below Gustafson's line; lab 07's 1F1B step (real compute)
idles a little more than (p-1)/(m+p-1), less with more micro-batches.
Lab 06: the same TP step across two nodes pays far more than inside one; a pipeline step little."""

from __future__ import annotations

import pytest

from lab_utils import twin
from lab_utils.calc import (
    bubble,
    bus_bandwidth,
    collective_time,
    fit_alpha_beta,
    gustafson_speedup,
    hierarchical_time,
    model_state_memory,
)
from lab_utils.experiments import lab05
from lab_utils.experiments.lab03 import twin as lab03_twin
from lab_utils.experiments.lab04 import twin as lab04_twin
from lab_utils.experiments.lab05 import twin as lab05_twin
from lab_utils.experiments.lab06 import twin as lab06_twin
from lab_utils.experiments.lab10 import twin as lab10_twin
from lab_utils.models import GPTConfig, TinyGPT, count_params


def test_all_reduce_fits_alpha_beta_and_busbw_is_the_link():
    sizes = [48 * 4**k for k in (0, 2, 4, 6)]
    c = lab03_twin.node_cluster(4)
    em = twin.emulate(lab03_twin.timed_sweep, 4, c, sizes, [2, 4], quiet=True, timeout_s=120)
    assert em.unknown == [] and sorted(em.results[0]) == [2, 4]
    for n, times in em.results[0].items():
        for impl, t in times.items():  # gloo's all_reduce (charged whole) and our ring (sends)
            fit = fit_alpha_beta(sizes, t)
            assert fit.r2 >= 0.99, (n, impl)
            assert fit.alpha_s == pytest.approx(2 * (n - 1) * c.intra.latency_s, rel=1e-3)
            busbw = bus_bandwidth("all_reduce", n, fit.bandwidth)
            assert busbw == pytest.approx(c.intra.bytes_per_s, rel=1e-3), (n, impl)


def test_hierarchical_beats_one_flat_ring_across_nodes_as_calc_says():
    c, d = lab03_twin.nodes_cluster(2, 2), 14e9  # 1 KiB floats charged as 14 GB of gradients
    em = twin.emulate(
        lab03_twin.hierarchy_times,
        4,
        c,
        2,
        1024,
        scale=lab03_twin.charged_as(4096, d),
        quiet=True,
        timeout_s=120,
    )
    t = em.results[0]
    nv, ib = (c.intra.latency_s, c.intra.bytes_per_s), (c.inter.latency_s, c.inter.bytes_per_s)
    flat = collective_time("all_reduce", 4, d, *ib)
    hier = hierarchical_time("all_reduce", 2, 2, d, *nv, *ib)
    assert t["one flat ring (sends)"] == pytest.approx(flat, rel=1e-3)
    assert t["hierarchical (sends)"] == pytest.approx(hier, rel=1e-3)  # full-duplex steps
    assert t["dist.all_reduce"] == pytest.approx(hier, rel=1e-3)  # the faster of the two
    assert flat > 2 * hier


def test_fsdp_prefetch_and_zero3_vs_zero2_on_the_emulated_clock():
    cfg = GPTConfig(vocab_size=64, seq_len=32, n_layer=3, n_head=4, d_model=64)
    names = ("FSDP", "FSDP prefetch", "FSDP keep, prefetch", "fully_shard prefetch")
    em = twin.emulate(
        lab05_twin.fsdp_steps,
        4,
        lab05_twin.fsdp_cluster(),
        cfg,
        2,
        names,
        scale=lab05_twin.fsdp_scale(cfg, 2),
        quiet=True,
        timeout_s=240,
    )
    assert em.unknown == []
    p = lab05_twin.step_points(em)
    off, on, keep = p["FSDP"], p["FSDP prefetch"], p["FSDP keep, prefetch"]
    assert off.hidden_s == 0.0 < on.hidden_s and on.step_s < off.step_s
    assert on.compute_s == pytest.approx(off.compute_s, rel=1e-9)  # the same FLOPs either way
    assert p["fully_shard prefetch"].step_s == pytest.approx(on.step_s, rel=1e-9)
    assert on.comm_s > 1.2 * keep.comm_s  # ZeRO-3 all-gathers again in backward
    assert 1 < on.step_s / keep.step_s < on.comm_s / keep.comm_s  # mostly hidden


def test_fsdp_unit_by_unit_on_the_emulated_clock():
    big = GPTConfig(n_layer=3, n_head=2, d_model=64)
    em = twin.emulate(
        lab05.unit_steps,
        4,
        lab05_twin.fsdp_cluster(),
        big,
        scale=lab05_twin.fsdp_scale(big, 2),
        quiet=True,
        timeout_s=240,
    )
    assert em.unknown == []
    tl, n = lab05.unit_timelines(em), big.n_layer
    model = TinyGPT(big, seed=0)
    numel, block = count_params(model), sum(p.numel() for p in model.blocks[0].parameters())
    root = numel - n * block
    state = model_state_memory(numel, "fp32_adam", 3, 4).total  # shard + grad + Adam m, v
    bf16 = lambda params: model_state_memory(params, "mixed_adam", 0).params  # noqa: E731
    for rank in range(4):
        plain, pre = tl[rank]["no prefetch"], tl[rank]["prefetch"]
        assert plain.state_bytes == pre.state_bytes == state
        assert plain.peak_held == bf16(root + block)  # the root and the block computing
        assert pre.peak_held == bf16(root + 2 * block)  # ... and the next one arriving
        assert plain.unit_numel == {**{f"L{i}": block for i in range(n)}, "root": root}
        assert plain.overlapped == {"forward": 0, "backward": 0}
        assert pre.overlapped == {"forward": n - 1, "backward": n - 1}
        for k in ("forward", "backward"):  # prefetch hides part of each gather, never adds
            assert 0 <= pre.exposed_gather_s[k] < plain.exposed_gather_s[k]
    events = tl[0]["no prefetch"].events
    mine = [(e["name"], e["mb"]) for e in events if e["rank"] == 0]
    for i in range(n):
        assert ("forward", f"L{i}") in mine and ("backward", f"L{i}") in mine
    assert sum(k == "all_gather" for k, _ in mine) == 2 * n + 1
    assert sum(k == "reduce_scatter" for k, _ in mine) == n + 1
    assert mine.count(("all_gather", "root")) == mine.count(("reduce_scatter", "root")) == 1
    # without prefetch a block's gather starts as the block before it ends: all of it exposed
    mb = [e for e in events if e["rank"] == 0 and e["name"] == "all_gather" and e["mb"] == "block"]
    ag = [e["end"] - e["start"] for e in mb]  # the blocks' forward gathers, then backward's
    assert tl[0]["no prefetch"].exposed_gather_s["forward"] == pytest.approx(sum(ag[1:n]))


CFG = GPTConfig(vocab_size=128, seq_len=32, n_layer=4, n_head=4, d_model=64)
L4 = twin.Cluster.preset("10GbE L4", nodes=2, gpus_per_node=2)  # lab 04's cluster
CAPS = [16 * 2**10, 128 * 2**10, 25 * 2**20]


@pytest.fixture(scope="module")
def sweep():
    em = twin.emulate(
        lab04_twin.bucket_sweep,
        4,
        L4,
        CFG,
        4,
        CAPS,
        scale=twin.Scale(flops=1024),
        quiet=True,
        timeout_s=240,
    )
    return em, lab04_twin.sweep_points(em)


@pytest.mark.parametrize("impl", lab04_twin.SWEEP_IMPLS)
def test_bucket_sweep_has_a_sweet_spot_inside(sweep, impl):
    small, mid, one = [p for p in sweep[1] if p.impl == impl]
    assert small.all_reduces > mid.all_reduces > one.all_reduces
    assert small.step_s > mid.step_s < one.step_s  # latency on the left, no overlap on the right
    assert one.hidden_s == 0.0 < mid.hidden_s  # one bucket waits for the end of backward
    assert small.comm_s > mid.comm_s > one.comm_s  # each all-reduce pays the latency again


def test_step_window_is_one_step_from_zero(sweep):
    em, points = sweep
    one = lab04_twin.step_window(em, 1)
    assert min(s["start"] for s in one.spans) >= 0.0
    assert max(one.step_times()) == pytest.approx(points[1].step_s)
    assert em.unknown == []


SIZES = [1, 2, 4]  # N = 4 spans two nodes


@pytest.fixture(scope="module")
def scaling():
    cfg = lab10_twin.SCALING_CONFIG
    em = twin.emulate(
        lab10_twin.scaling_steps,
        4,
        lab10_twin.scaling_cluster(4),
        SIZES,
        global_batch=32,
        per_rank_batch=8,
        steps=1,
        scale=lab10_twin.scaling_scale(cfg, 32),
        quiet=True,
        timeout_s=240,
    )
    return em.results[0]


def test_strong_scaling_fits_amdahl_on_the_emulated_clock(scaling):
    curve = lab10_twin.amdahl_curve(scaling, SIZES, "emulated")
    assert curve.fit.r2 > 0.99 and 0 < curve.fit.serial_fraction < 0.5
    assert 1 < curve.speedups[1] < 2 and 2 < curve.speedups[2] < 4
    t1 = scaling.get("strong", 1).step_s
    above = {n: scaling.get("strong", n).step_s - t1 / n for n in SIZES}
    assert 0 < above[2] < above[4]  # the tail grows when the group crosses the network


def test_weak_scaling_stays_just_below_gustafson(scaling):
    t1 = scaling.get("weak", 1).step_s
    for n in SIZES[1:]:
        t_n = scaling.get("weak", n).step_s
        s = 1 - t1 / t_n
        assert 0.5 * n < n * t1 / t_n <= gustafson_speedup(s, n)


def test_pipeline_bubble_on_the_emulated_clock_follows_the_formula():
    em = twin.emulate(
        lab10_twin.bubble_steps,
        2,
        lab10_twin.bubble_cluster(),
        [2, 8],
        scale=lab10_twin.bubble_scale(),
        quiet=True,
        timeout_s=240,
    )
    assert em.unknown == []
    idle = lab10_twin.bubbles(em)
    assert idle[8] < idle[2]
    for m, b in idle.items():  # a little above: the last stage also computes the head
        assert 0 < b - bubble("1f1b", 2, m).of_total < 0.03, (m, b)


def test_tp_pays_the_network_far_more_than_pp():
    cfg = GPTConfig(vocab_size=64, seq_len=32, n_layer=4, n_head=4, d_model=64)
    t = {
        p: lab06_twin.step_times(
            twin.emulate(
                lab06_twin.tp_pp_steps,
                2,
                c,
                cfg,
                8,
                scale=lab06_twin.layer_scale(cfg, 8),
                quiet=True,
                timeout_s=120,
            ).results
        )
        for p, c in lab06_twin.placements().items()
    }
    inside, across = t["inside one node"], t["across two nodes"]
    assert across["TP"] > 1.2 * inside["TP"]
    assert across["TP"] - inside["TP"] > 3 * (across["PP"] - inside["PP"]) > 0
