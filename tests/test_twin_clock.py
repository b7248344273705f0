"""The emulated cluster without ranks: the virtual clock's rules on hand-computed cases, the cost
of a group by the links it spans, the compute charge, the outputs, and bad input."""

from __future__ import annotations

import json

import pytest
import torch

from lab_utils import twin
from lab_utils.calc.comm import collective_time, group_collective_time, hierarchical_time
from lab_utils.twin.clock import RankClock
from lab_utils.twin.compute import ComputeCharge
from lab_utils.twin.result import Emulation, RankRecord
from lab_utils.twin.session import Session

C = twin.Cluster(
    nodes=2,
    gpus_per_node=2,
    peak_flops=1e12,
    efficiency=0.5,
    intra=twin.Link("nv", 1e-6, 100e9),
    inter=twin.Link("ib", 10e-6, 10e9),
)


def test_compute_then_async_comm_overlaps_until_wait():
    c = RankClock(0)
    c.compute(2.0, "forward")
    c.compute(1.0, "forward")  # back to back: one span
    assert [(s.start, s.end) for s in c.spans] == [(0.0, 3.0)]
    end = c.occupy("comm", c.ready(), 4.0, "all_reduce")  # async: issued at 3, ends at 7
    c.compute(2.0, "backward")  # runs under the all-reduce
    assert (end, c.now) == (7.0, 5.0)
    c.wait(end)
    assert c.now == 7.0  # waited 2 s, not 4
    assert c.ready() == 7.0


def test_comm_stream_queues_and_join_waits_for_all():
    c = RankClock(0)
    a = c.occupy("comm", c.ready(), 1.0, "x")
    b = c.occupy("comm", c.ready("comm"), 1.0, "y")  # the stream is busy until 1
    assert (a, b) == (1.0, 2.0)
    p = c.occupy("p2p", c.ready("p2p"), 0.5, "send")  # its own stream: starts at 0
    assert p == 0.5
    c.mark_step()
    assert c.now == 2.0 and c.step_times() == [2.0]


def test_a_collective_starts_at_the_latest_participant():
    early, late = RankClock(0), RankClock(1)
    late.compute(3.0)
    start = max(early.ready(), late.ready())  # what the backend's MAX all-reduce computes
    ends = [c.occupy("comm", start, 1.0, "all_reduce") for c in (early, late)]
    for c in (early, late):
        c.join()
    assert ends == [4.0, 4.0] and early.now == late.now == 4.0
    assert early.spans[0].start == 3.0  # the early rank idled 3 s


def test_group_cost_follows_the_links_it_spans():
    a, bw, A, BW = 1e-6, 100e9, 10e-6, 10e9
    d = 1e6
    assert group_collective_time("all_reduce", 2, 1, 2, d, a, bw, A, BW) == collective_time(
        "all_reduce", 2, d, a, bw
    )  # inside a node: intra
    assert group_collective_time("all_reduce", 2, 2, 1, d, a, bw, A, BW) == collective_time(
        "all_reduce", 2, d, A, BW
    )  # one per node: inter
    hier = (
        collective_time("reduce_scatter", 2, d, a, bw)
        + collective_time("all_reduce", 2, d / 2, A, BW)
        + collective_time("all_gather", 2, d, a, bw)
    )
    assert hierarchical_time("all_reduce", 2, 2, d, a, bw, A, BW) == pytest.approx(hier)
    flat = collective_time("all_reduce", 4, d, A, BW)
    assert group_collective_time("all_reduce", 4, 2, 2, d, a, bw, A, BW) == pytest.approx(
        min(flat, hier)
    )
    assert hier < flat  # by hand: 0.55e-4 + 0.7e-4 < 1.56e-4 (s)


def test_compute_is_charged_from_counted_flops():
    s = Session(0, C, twin.Scale(flops=3.0))
    x, w = torch.randn(8, 16), torch.randn(16, 32)
    with ComputeCharge(s) as mode:
        (x @ w).relu()  # relu: no FLOPs
    assert mode.flops == 2 * 8 * 16 * 32
    assert s.clock.now == pytest.approx(3 * 2 * 8 * 16 * 32 / (1e12 * 0.5))
    assert s.clock.spans[0].name == "forward"


def test_unknown_call_is_reported_once():
    s = Session(1, C, twin.Scale())
    for _ in range(3):
        s.report_unknown("c10d.gather_")
    assert s.unknown == ["c10d.gather_"]


def test_preset_uses_the_hardware_table():
    c = twin.Cluster.preset("DGX H100", nodes=2)
    assert (c.world_size, c.intra.bytes_per_s, c.inter.bytes_per_s) == (16, 450e9, 50e9)
    assert twin.Cluster.preset("DGX A100", nodes=1).inter.bytes_per_s == 25e9
    assert c.span([0, 1, 8]) == twin.topology.Span(3, 2, 2)
    assert c.with_(nodes=4).world_size == 32


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: C.with_(nodes=0), "Cluster.nodes"),
        (lambda: C.with_(gpus_per_node=1.5), "Cluster.gpus_per_node"),
        (lambda: C.with_(efficiency=0), "Cluster.efficiency"),
        (lambda: C.with_(efficiency=1.5), "Cluster.efficiency"),
        (lambda: twin.Link("ib", 1e-6, 0), "ib.bytes_per_s"),
        (lambda: twin.Link("ib", -1, 1e9), "ib.latency_s"),
        (lambda: C.with_(inter=25e9), "Cluster.inter"),
        (lambda: twin.Cluster.preset("DGX Z9"), "DGX Z9"),
        (lambda: twin.Cluster.preset("DGX H100", gpus_per_node=9), "gpus_per_node"),
        (lambda: C.check_world(3), "world_size"),
        (lambda: C.span([0, 4]), "rank 4"),
        (lambda: twin.Scale(flops=0), "Scale.flops"),
        (lambda: twin.emulate(lambda ctx: 0, 3, C), "world_size"),
        (lambda: twin.emulate(lambda ctx: 0, 4, "DGX H100"), "cluster"),
    ],
)
def test_bad_input_names_the_field(make, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        make()


def _fake() -> Emulation:
    spans = [
        dict(rank=r, stream=st, name=n, start=a, end=b, bytes=0.0, flops=0.0)
        for r in (0, 1)
        for st, n, a, b in (
            ("compute", "forward", 0.0, 1.0),
            ("comm", "all_reduce", 1.0, 3.0),
            ("compute", "backward", 2.0, 2.5),
        )
    ]
    return Emulation(
        C,
        twin.Scale(),
        [
            RankRecord(r, None, [s for s in spans if s["rank"] == r], [3.0], 3.0, [], {})
            for r in (0, 1)
        ],
    )


def test_outputs_timeline_trace_and_figure(tmp_path):
    em = _fake()
    assert em.step_times() == [3.0] and em.busy(0, "compute") == 1.5
    assert em.overlap(0) == 0.5
    idle = [e for e in twin.timeline_events(em) if e["name"] == "idle" and e["rank"] == 0]
    assert [(e["start"], e["end"]) for e in idle] == [(1.0, 2.0), (2.5, 3.0)]
    path = tmp_path / "t.json"
    twin.chrome_trace(em, str(path))
    trace = json.loads(path.read_text())
    names = {
        (e["pid"], e.get("tid"), e["args"]["name"]) for e in trace["traceEvents"] if e["ph"] == "M"
    }
    assert (0, None, "rank 0 (node 0)") in names and (1, 1, "comm") in names
    x = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(x) == 6 and x[1]["ts"] == 1e6 and x[1]["dur"] == 2e6
    fig = twin.figure(em)
    assert {"rank 0 compute", "rank 0 comm"} <= {y for d in fig.data for y in d.y}


def test_scale_model_charges_the_full_models_proportions():
    from lab_utils.calc.params import param_count, preset

    s = twin.Scale.model("llama3-8b", 2e5, 4, 64, 32)
    n = param_count(preset("llama3-8b")).total
    assert s.bytes == pytest.approx(n / 2e5)
    assert s.flops == pytest.approx((6 * n + 12 * 32 * 32 * 4096) / (6 * 2e5 + 12 * 4 * 32 * 64))
    assert "llama3-8b" in s.name
    with pytest.raises(ValueError, match="tiny_params"):
        twin.Scale.model("llama3-8b", 0, 4, 64, 32)


def test_a_deferred_collective_resolves_in_issue_order_when_needed():
    c = RankClock(0)
    asked = []
    first = c.defer(lambda: asked.append("a") or 1.0, 2.0, "all_reduce")
    c.compute(5.0)  # the rank runs on; nothing resolved yet
    second = c.defer(lambda: asked.append("b") or 4.0, 1.0, "all_gather")
    assert asked == []
    assert second() == 5.0  # resolving b first resolves a: 1 + 2 = 3, then
    assert asked == ["a", "b"]  # b starts at max(4, stream free 3) = 4, ends at 5
    assert first() == 3.0
    assert c.ready() == 5.0


def test_the_timeline_feeds_calcs_bubble_reader():
    from lab_utils.calc.timeline import bubble_from_timeline

    busy = [e for e in twin.timeline_events(_fake(), idle=False) if e["lane"] == "compute"]
    assert bubble_from_timeline(busy).per_rank == {0: 0.4, 1: 0.4}  # idle 1 s of 0..2.5 s


def test_p2p_links_are_full_duplex():
    """A send and a receive of one rank overlap; two sends (or two receives) queue."""
    c = RankClock(0)
    s1 = c.occupy("p2p", c.ready("p2p", "p2p send"), 1.0, "send", lane="p2p send")
    r1 = c.occupy("p2p", c.ready("p2p", "p2p recv"), 1.0, "recv", lane="p2p recv")
    s2 = c.occupy("p2p", c.ready("p2p", "p2p send"), 1.0, "send", lane="p2p send")
    assert (s1, r1, s2) == (1.0, 1.0, 2.0)
    assert c.ready("p2p") == 2.0  # the stream as a whole is free when both lanes are
