"""Pipeline parallelism from send/recv (lab_utils.parallel.pipeline_parallel) against one process.

The schedule functions' orders are checked without a launch against lab_utils.calc.pipeline
and the closed forms of Qi et al. 2023. Launches (each bundles several experiments): every
schedule's gradients, loss, peak in-flight count and p2p bytes (formula, ledger, wire) at p = 4
and p = 2; a deadlocking order; two neighbours that disagree on the order (silently wrong
gradients). The schedules' bubbles on the emulated clock: tests/test_twin_labs2.py.
"""

import itertools

import pytest
import torch

from lab_utils.calc.pipeline import bubble, schedule
from lab_utils.calc.timeline import bubble_from_timeline
from lab_utils.experiments.lab07 import grad_error, p2p_bytes_formula, reference_grads, run_pipeline
from lab_utils.experiments.lab07.tables import in_flight_formula, measured_in_flight
from lab_utils.experiments.lab07.torch_pipeline import replay
from lab_utils.measure import GLOO_HEADER_BYTES
from lab_utils.parallel.pipeline_parallel.schedules import (
    SCHEDULES,
    from_order,
    parse_op,
    zero_bubble,
)
from lab_utils.parallel.pipeline_parallel.stage import (
    StageWorker,
    pipeline_neighbours,
    stage_position,
)
from lab_utils.runtime.launch import RankFailure
from lab_utils.topology import Topology

M = 8  # micro-batches in the launches (> p: the schedules reach their steady state)
ALL = tuple(SCHEDULES)  # gpipe, 1f1b, interleaved, zb-h1, zb-h2


class _Recorder:
    """Stands in for a StageWorker: records the operations a schedule function calls."""

    def __init__(self, stage, n_stages, m, ops, chunk=None):
        self.stage, self.n_stages, self.m, self.ops, self.chunk = stage, n_stages, m, ops, chunk
        self.first, self.last = stage == 0, stage == n_stages - 1

    def _op(self, kind, i):  # calc's labels: "F3", or "F3c1" when a rank holds chunks
        self.ops.append(f"{kind}{i}" + ("" if self.chunk is None else f"c{self.chunk}"))

    def forward(self, i):
        self._op("F", i)

    def backward(self, i):
        self._op("B", i)

    def backward_input(self, i):
        self._op("B", i)

    def backward_weight(self, i):
        self._op("W", i)


def _orders(name, p, m, v=1):
    fn = SCHEDULES[name][0]
    out = []
    for r in range(p):
        ops: list[str] = []
        chunks = [_Recorder(c * p + r, p * v, m, ops, c if v > 1 else None) for c in range(v)]
        fn(chunks if v > 1 else chunks[0])
        out.append(ops)
    return out


def _replayed(orders, p, v=1, split=False):
    """The ideal timeline of per-rank orders (t_f = 1, t_b = 2, T_B = T_W = 1, free p2p)."""
    events = [
        dict(rank=r, name=k, mb=i, stage=c * p + r, start=n)
        for r in range(p)
        for n, (k, i, c) in enumerate(map(parse_op, orders[r]))
    ]
    return replay(events, 1.0, 2.0, 1.0, v, split)


# ------------------------------------------------------------------ orders, without a launch
@pytest.mark.parametrize("name, v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)])
@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 4), (4, 16), (3, 6)])
def test_schedule_orders_match_calc(name, v, p, m):
    """The functions the ranks run give calc.pipeline.schedule's orders (Megatron's
    interleaving, 1F1B's F/B order with deferred W's for ZB-H1)."""
    ideal = schedule(name, p, m, v)
    assert _orders(name, p, m, v) == [list(o) for o in ideal.order]


@pytest.mark.parametrize("p, m", [(2, 4), (3, 5), (4, 7), (4, 8), (4, 16), (6, 12)])
def test_zero_bubble_closed_forms_qi_2023(p, m):
    """ZB-H1 idles (p-1)(t_f + T_B - T_W) per step and holds p (Qi et al. 2023 Sec. 3.1);
    ZB-H2 holds 2p-1 and, once m >= 2p-1, every rank is busy from its first op to its last
    (a parallelogram): its steady-state bubble (p-1)(t_f + T_B - 2T_W) = 0 at t_f=T_B=T_W."""
    h1 = _replayed(_orders("zb-h1", p, m), p, split=True)
    assert bubble_from_timeline(h1).mean == pytest.approx(bubble("zb-h1", p, m, t_w=1.0).of_total)
    h2 = _replayed(_orders("zb-h2", p, m), p, split=True)
    assert bubble_from_timeline(h2, window="rank").max == pytest.approx(
        bubble("zb-h2", p, m, t_w=1.0).of_total, abs=1e-12
    )
    # one step alone still has the fill: as much as ZB-H1
    assert bubble_from_timeline(h2).mean == pytest.approx(bubble_from_timeline(h1).mean)
    assert schedule("zb-h1", p, m).peak_in_flight == (p,) * p  # calc's ideal timeline agrees


@pytest.mark.parametrize("p, m", [(4, 4), (4, 5), (4, 6), (3, 2), (5, 7)])
def test_zb_h2_with_few_microbatches(p, m):
    """With m < 2p-1 stage 0 runs out of forwards before its first gradient returns: the
    slowest rank idles 2p-1-m units of t_f (benchmarks/bench_bubble.py's formula)."""
    h2 = _replayed(_orders("zb-h2", p, m), p, split=True)
    idle = 2 * p - 1 - m
    assert bubble_from_timeline(h2, window="rank").max == pytest.approx(idle / (3 * m + idle))


def test_from_order_parses_chunks_and_splits_only_with_w():
    assert parse_op("F3") == ("F", 3, 0) and parse_op("W12c1") == ("W", 12, 1)
    for bad in ("X1", "F", "Fc1", "F1c", "B-1"):
        with pytest.raises(ValueError):
            parse_op(bad)
    ops: list[str] = []
    rec = _Recorder(0, 2, 2, ops)
    rec.backward = lambda i: ops.append(f"whole{i}")
    from_order([rec], ["F0", "B0"])
    from_order([rec], ["F1", "B1", "W1"])
    assert ops == ["F0", "whole0", "F1", "B1", "W1"]


def test_pipeline_neighbours_from_topology():
    topo = Topology(dp=2, pp=2)  # ranks (pp, dp): 0 (0,0), 1 (0,1), 2 (1,0), 3 (1,1)
    assert pipeline_neighbours(topo, 0) == (None, 2)
    assert pipeline_neighbours(topo, 3) == (1, None)
    loop = Topology(pp=4)  # interleaved: 8 stages, stage k on rank k % 4
    assert pipeline_neighbours(loop, 0, stage=4, n_stages=8) == (3, 1)
    assert pipeline_neighbours(loop, 3, stage=3, n_stages=8) == (2, 0)
    assert [stage_position(k, 4, "V") for k in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    with pytest.raises(ValueError, match="only the first stage"):
        StageWorker(torch.nn.Identity(), 1, 4, None, 2, [], [], (1,))


def test_p2p_bytes_formula():
    msg = 2 * 16 * 32 * 4  # (b, T, C) fp32
    assert p2p_bytes_formula("1f1b", 4, 8) == [8 * msg, 16 * msg, 16 * msg, 8 * msg]
    inter = p2p_bytes_formula("interleaved", 4, 8)  # v = 2: twice the boundaries
    assert sum(inter) == 2 * 8 * (4 * 2 - 1) * msg and inter == [
        24 * msg,
        32 * msg,
        32 * msg,
        24 * msg,
    ]


def test_zb_h2_needs_its_deferred_w():
    """ZB-H2's zero steady-state bubble needs every stage to defer its W's by 2(p-1) rounds
    (so every stage holds 2p-1 micro-batches): with any smaller deferral on some stage, the
    same rounds (F_x, B_(x-2(p-1-s)), W_(x-lag_s)) leave a rank idle."""
    p, m = 4, 8
    for lags in itertools.product(*[range(2 * (p - 1 - s), 2 * (p - 1) + 1) for s in range(p)]):
        orders = []
        for s, lag_w in enumerate(lags):
            lag_b, ops = 2 * (p - 1 - s), []
            for x in range(m + lag_w):
                ops += [f"F{x}"] if x < m else []
                ops += [f"B{x - lag_b}"] if 0 <= x - lag_b < m else []
                ops += [f"W{x - lag_w}"] if 0 <= x - lag_w < m else []
            orders.append(ops)
        steady = bubble_from_timeline(_replayed(orders, p, split=True), window="rank").max
        assert (steady < 1e-12) == (lags == (2 * (p - 1),) * p), lags


# ------------------------------------------------------------------ on real ranks
@pytest.mark.parametrize("p", [4, 2])
def test_every_schedule_matches_reference(p):
    """Gradients within 1e-6 (fp32) of one process on the whole batch; the loss; peak in-flight
    micro-batches as the formulas say; p2p bytes: ledger = formula exactly, wire = formula +
    gloo's 48-byte headers. 1F1B on an uneven split too (stage 0: embeddings only)."""
    uneven = [0, 4, 2, 2] if p == 4 else [5, 3]
    exps = [dict(schedule=s, m=M, measure_bytes=True, ledger=True) for s in ALL]
    exps.append(dict(schedule="1f1b", m=M, balance=uneven))
    results = run_pipeline(exps, p, timeout_s=240, preload=("torch._dynamo",))
    ref_loss, ref = reference_grads(M)
    for exp, res in zip(exps, results):
        assert grad_error(res, ref) < 1e-6, exp
        assert res.loss == pytest.approx(ref_loss, rel=1e-6), exp
    for res in results[: len(ALL)]:
        assert measured_in_flight(res) == in_flight_formula(res.schedule, p, M, res.v), res.schedule
        formula = p2p_bytes_formula(res.schedule, p, M)
        assert res.ledger_bytes == formula, res.schedule
        for wire, f in zip(res.wire, formula):
            if wire.sent is not None:  # Linux: the kernel's per-socket counters
                assert f <= wire.sent <= f * 1.05 and (wire.sent - f) % GLOO_HEADER_BYTES == 0
    gpipe, one_f1b = results[0], results[1]
    assert one_f1b.peak_bytes[0] == max(one_f1b.peak_bytes)  # stage 0 holds the most
    assert gpipe.peak_bytes[0] > one_f1b.peak_bytes[0]


def test_deadlock_and_silent_swap_are_reported():
    """A wrong warm-up deadlocks (the stuck stage says what it waited for); two neighbours
    that run B in different micro-batch orders get each other's gradients, with no error."""
    from lab_utils.exercises.zb_h1_order import wrong_lifo_cooldown, wrong_warmup_by_stage

    with pytest.raises(RankFailure, match=r"waited 1 s for the (gradient|activation)"):
        run_pipeline(
            [dict(order=wrong_warmup_by_stage, m=4, deadlock_after_s=1.0, warmup_step=False)],
            2,
            timeout_s=60,
        )
    res = run_pipeline(
        [dict(order=wrong_lifo_cooldown, m=M, deadlock_after_s=5.0)], 4, timeout_s=120
    )[0]
    assert grad_error(res, reference_grads(M)[1]) > 1e-4


def test_torch_schedules_match_reference_on_the_emulated_cluster():
    """torch.distributed.pipelining's schedules on the emulated cluster: exact loss and
    gradients; on the emulated clock its zero-bubble schedules idle less than its 1F1B at the
    same compute (torch's W starts from the gradients B kept)."""
    from lab_utils.experiments.lab07.pipeline import pipeline_cluster, pipeline_scale
    from lab_utils.experiments.lab07.torch_pipeline import TORCH_CONFIG, run_torch_pipeline
    from lab_utils.parallel.pipeline_parallel.torch_schedules import TORCH_SCHEDULES

    # p = 2 ranks (4 stages with v = 2): every rank imports torch.distributed.pipelining (~6 s of
    # CPU each, dynamo and DTensor), so fewer ranks on 2 cores is a much shorter test.
    p, m = 2, 4
    exps = [dict(schedule=name, m=m) for name in TORCH_SCHEDULES]
    results = run_torch_pipeline(
        exps, p, pipeline_cluster(p=p), pipeline_scale(TORCH_CONFIG), timeout_s=180
    )
    ref_loss, ref_grads = reference_grads(m, cfg=TORCH_CONFIG)
    for res in results:
        assert res.loss == pytest.approx(ref_loss, rel=1e-5), res.schedule
        assert set(res.grads) == set(ref_grads)
        for n, g in ref_grads.items():
            torch.testing.assert_close(res.grads[n], g, rtol=1e-4, atol=1e-6)
        assert res.replayed is not None  # torch's recorded order re-times without deadlock
        assert len([e for e in res.replayed if e["name"] == "F"]) == p * res.v * m
    by = {r.schedule: r for r in results}
    computed = {k: sum(e["end"] - e["start"] for e in r.events) for k, r in by.items()}
    assert computed["zbv"] == pytest.approx(computed["1f1b"], rel=1e-9)
    assert by["zbv"].bubble.mean < by["interleaved-zb"].bubble.mean < by["1f1b"].bubble.mean / 2


@pytest.mark.parametrize(
    "name, p, m",
    [("gpipe", 4, 4), ("1f1b", 4, 8), ("zb-h1", 4, 8), ("zb-h1", 3, 6), ("interleaved", 2, 4)],
)
def test_replay_reproduces_calc_schedules(name, p, m):
    v = 2 if name == "interleaved" else 1
    ideal = schedule(name, p, m, v)
    events = [
        dict(rank=e.rank, name=e.kind, mb=e.microbatch, stage=e.chunk * p + e.rank, start=e.start)
        for e in ideal.events
    ]
    again = replay(events, 1.0, 2.0, 1.0, v, split=name == "zb-h1")
    assert max(e["end"] for e in again) == pytest.approx(ideal.makespan)
    assert (
        replay(
            [
                dict(rank=0, name="B", mb=0, stage=0, start=0),
                dict(rank=0, name="F", mb=0, stage=0, start=1),
            ]
        )
        is None
    )  # B before F


def test_zero_bubble_generator():
    ops: list[str] = []
    zero_bubble(_Recorder(1, 4, 8, ops), k=2)  # ZB-H2, stage 1: 2(p-1-s) = 4 forwards alone
    assert ops[:6] == ["F0", "F1", "F2", "F3", "F4", "B0"]
