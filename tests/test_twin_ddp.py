"""The emulated cluster runs real DDP (torch's and lab_utils.parallel's) on 4 ranks over 2 nodes:
same numbers as a plain gloo run, every bucket seen, and bucketed all-reduces overlapping the
backward pass on the emulated clock (naive DDP, which reduces after backward, overlaps nothing)."""

from __future__ import annotations

import pytest
import torch

from lab_utils import run, twin
from lab_utils.models import GPTConfig, TinyGPT

CFG = GPTConfig(vocab_size=128, seq_len=32, n_layer=4, n_head=4, d_model=64)
CAP = 64 * 1024  # bytes per bucket: several buckets for the lab model
IMPLS = ("torch", "bucket", "naive")
# A slow GPU and 10 GbE, so compute and communication are of one size and overlap shows.
CLUSTER = twin.Cluster(
    nodes=2,
    gpus_per_node=2,
    peak_flops=1e12,
    efficiency=0.5,
    intra=twin.Link("PCIe", 10e-6, 16e9),
    inter=twin.Link("10GbE", 50e-6, 1.25e9),
    name="slow 2x2",
)


def ddp_steps(ctx, steps=2):
    from lab_utils.experiments.lab04 import make_ddp, train_step

    out = {}
    for impl in IMPLS:
        ddp = make_ddp(impl, TinyGPT(CFG, seed=0), CAP)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(ctx.rank)
        losses, marks = [], [twin.step()]
        for _ in range(steps):
            x = torch.randint(0, CFG.vocab_size, (4, CFG.seq_len), generator=g)
            losses.append(train_step(ddp, opt, x, x))
            marks.append(twin.step())
        out[impl] = (losses, marks)
    return out


@pytest.fixture(scope="module")
def runs():
    return (
        twin.emulate(ddp_steps, 4, CLUSTER, quiet=True, timeout_s=120),
        run(ddp_steps, 4, backend="gloo", quiet=True, timeout_s=120),
    )


def _last_step(em, impl, rank=0):
    """(spans, emulated seconds) of ``impl``'s second step on ``rank``."""
    a, b = em.results[rank][impl][1][-2:]
    spans = [s for s in em.records[rank].spans if a <= s["start"] < b]
    return spans, b - a


@pytest.mark.parametrize("impl", IMPLS)
def test_same_numbers_as_a_plain_gloo_run(runs, impl):
    em, plain = runs
    assert [r[impl][0] for r in em.results] == [r[impl][0] for r in plain]
    assert all(m is None for r in plain for m in r[impl][1])  # twin.step() off the twin
    assert em.unknown == []


@pytest.mark.parametrize("impl", ["torch", "bucket"])
def test_bucketed_all_reduces_overlap_backward(runs, impl):
    spans, t_step = _last_step(runs[0], impl)
    comm = [s for s in spans if s["stream"] == "comm" and s["bytes"] > 64]  # not the loss mean
    assert len(comm) >= 3  # >= 3 buckets
    bwd_end = max(s["end"] for s in spans if s["name"] == "backward")
    assert min(s["start"] for s in comm) < bwd_end  # a bucket starts while backward runs
    serial = sum(s["end"] - s["start"] for s in spans if s["stream"] in ("compute", "comm"))
    assert t_step < serial  # overlap shortens the step below compute + comm


def test_naive_ddp_communicates_after_backward(runs):
    spans, t_naive = _last_step(runs[0], "naive")
    bwd_end = max(s["end"] for s in spans if s["name"] == "backward")
    assert all(s["start"] >= bwd_end for s in spans if s["stream"] == "comm" and s["bytes"] > 64)
    assert _last_step(runs[0], "bucket")[1] < t_naive
    assert _last_step(runs[0], "torch")[1] < t_naive


CAPS = [2**k for k in (12, 16, 18, 25)]  # bytes per bucket: 4 KB ... one bucket for everything


def bucket_sweep(ctx):
    from lab_utils.experiments.lab04 import make_ddp, train_step

    out = {}
    for cap in CAPS:
        ddp = make_ddp("torch", TinyGPT(CFG, seed=0), cap)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        x = torch.randint(0, CFG.vocab_size, (8, CFG.seq_len))
        for _ in range(2):  # the second step: DDP has rebuilt its buckets
            t0 = twin.step()
            train_step(ddp, opt, x, x)
            out[cap] = twin.step() - t0
    return out


def test_lab04_bucket_size_has_a_sweet_spot():
    """Small buckets pay the latency many times, one bucket cannot overlap: in between wins
    (lab 04's lesson, on the emulated clock; 10 x the lab model's FLOPs)."""
    links = dict(intra=twin.Link("PCIe", 20e-6, 16e9), inter=twin.Link("10GbE", 100e-6, 1.25e9))
    c = CLUSTER.with_(**links)
    t = twin.emulate(bucket_sweep, 4, c, scale=twin.Scale(flops=10), quiet=True).results[0]
    best = min(CAPS, key=t.get)
    assert CAPS[0] < best < CAPS[-1], t
    assert t[best] < 0.99 * t[CAPS[-1]] and t[best] < 0.9 * t[CAPS[0]], t
