"""Lessons of labs 07, 08 and 11 on the emulated cluster (lab_utils.twin), asserted on the
EMULATED clock (deterministic: the same numbers on a quiet or a loaded machine), never on wall
time.

Lab 07: every schedule of our pipeline (GPipe, 1F1B, interleaved, ZB-H1, ZB-H2) runs on 4
emulated H100s; its recorded order replays to the formula's bubble, the emulated bubble sits
just above the formula (the head's FLOPs and the messages, both real), interleaving's gain
shrinks when every boundary crosses the network, the last stage is the compute-heavy one, and
torch.distributed.pipelining's schedules run on the same clock with exact gradients.

Lab 11: a synchronous checkpoint stalls training for the whole write (state bytes / the storage
bandwidth), an asynchronous one for the staging copy only, with the same step time between
saves; a GPU at half speed makes every rank's step wait for it, and per-rank compute names it.
The emulator's additions these use (the "io" stream, ``Cluster.slow_ranks``) are checked here
by hand-computed cases.
"""

import pytest

from lab_utils import twin
from lab_utils.calc.timeline import bubble_from_timeline
from lab_utils.experiments.lab07 import reference_grads, run_pipeline
from lab_utils.experiments.lab07.pipeline import PP_CONFIG, pipeline_cluster, pipeline_scale
from lab_utils.experiments.lab07.tables import (
    bubble_formula,
    in_flight_formula,
    measured_bubble,
    measured_in_flight,
    stage_costs,
)
from lab_utils.experiments.lab07.torch_pipeline import replay
from lab_utils.parallel.pipeline_parallel.schedules import SCHEDULES
from lab_utils.twin.clock import RankClock

P, M = 4, 8
ALL = tuple(SCHEDULES)  # gpipe, 1f1b, interleaved, zb-h1, zb-h2


@pytest.fixture(scope="module")
def pipes():
    exps = [dict(schedule=s, m=M) for s in ALL]
    inside = run_pipeline(exps, P, pipeline_cluster(), pipeline_scale(), timeout_s=240)
    across = run_pipeline(
        exps[:3], P, pipeline_cluster(across_nodes=True), pipeline_scale(), timeout_s=240
    )
    return {r.schedule: r for r in inside}, {r.schedule: r for r in across}


def test_emulated_pipeline_replays_to_the_formula(pipes):
    """Each rank's recorded ORDER, re-timed with exact op times, gives the formula's bubble;
    the in-flight counts are exact; gradients stay the single-process ones."""
    inside, _ = pipes
    ref = reference_grads(M)[1]
    for name, run in inside.items():
        split = SCHEDULES[name][2]
        again = replay(run.events, 1.0, 2.0, 1.0, run.v, split)
        window = "rank" if name == "zb-h2" else "global"
        b = bubble_from_timeline(again, window=window)
        assert (b.max if window == "rank" else b.mean) == pytest.approx(
            bubble_formula(name, P, M, run.v), abs=1e-12
        )
        assert measured_in_flight(run) == in_flight_formula(name, P, M, run.v)
        assert max((run.grads[n] - g).abs().max().item() for n, g in ref.items()) < 1e-6


def test_emulated_bubbles_teach_the_lesson(pipes):
    """On one node (NVLink): GPipe and 1F1B idle alike, a little above (p-1)/(m+p-1) (the
    head's FLOPs on the last stage, the messages); interleaving idles less. Across nodes
    every boundary pays the network: interleaving, with twice the messages, loses most."""
    inside, across = pipes
    g, o, i = (measured_bubble(inside[s]) for s in ("gpipe", "1f1b", "interleaved"))
    assert g == pytest.approx(o, abs=0.005)
    assert bubble_formula("1f1b", P, M) < o < bubble_formula("1f1b", P, M) + 0.05
    assert i < o - 0.05
    loss = {
        s: measured_bubble(across[s]) - measured_bubble(inside[s]) for s in ("1f1b", "interleaved")
    }
    assert loss["interleaved"] > 2 * loss["1f1b"] > 0


def test_last_stage_is_the_compute_hot_spot():
    """With V / C = 64 (GPT-2's ratio) the head makes the LAST stage the slowest on the
    emulated clock; the embedding lookup does no matmul and is charged nothing."""
    from dataclasses import replace

    cfg = replace(PP_CONFIG, vocab_size=2048)
    run = run_pipeline(
        [dict(schedule="gpipe", m=M, cfg=cfg)],
        P,
        pipeline_cluster(),
        pipeline_scale(cfg),
        timeout_s=240,
    )[0]
    costs = stage_costs(run)
    assert costs[0] == pytest.approx(costs[1], rel=1e-9) == pytest.approx(costs[2], rel=1e-9)
    assert costs[3] > 2 * costs[0]


def test_io_stream_runs_beside_steps_until_waited():
    """Hand-computed: a background write does not hold the step mark; a waited one does."""
    c = RankClock(0)
    c.compute(1.0)
    assert c.io(0.5, "staging") == 1.5 and c.now == 1.5  # waited: the rank stalls
    assert c.io(10.0, "write", wait=False) == 11.5 and c.now == 1.5
    c.compute(1.0)
    assert c.mark_step() == 2.5  # the write outlives the step
    assert c.io(1.0, "staging") == 12.5  # the next save waits for it
    c.wait_io()
    assert c.now == 12.5 and [s.stream for s in c.spans].count("io") == 3


def test_slow_ranks_are_validated_and_charged():
    c = twin.Cluster.preset("DGX H100", nodes=1, gpus_per_node=4)
    assert c.with_(slow_ranks=((2, 0.5),)).rank_flops_per_s(2) == c.flops_per_s / 2
    assert c.with_(slow_ranks=((2, 0.5),)).rank_flops_per_s(1) == c.flops_per_s
    for bad, field in [
        (((4, 0.5),), "slow_ranks"),
        (((1, 0.0),), "factor"),
        (((1, 1.5),), "factor"),
        ((1,), "pairs"),
    ]:
        with pytest.raises(ValueError, match=field):
            c.with_(slow_ranks=bad)


@pytest.fixture(scope="module")
def lab11_runs():
    from lab_utils.experiments.lab11 import twin as t11

    cluster = twin.Cluster.preset("DGX H100", nodes=1, gpus_per_node=4)
    scale = t11.lab_scale()
    saves = {
        m: twin.emulate(t11.checkpoint_steps, 4, cluster, m, scale=scale, timeout_s=240)
        for m in ("sync", "async")
    }
    stragglers = [
        twin.emulate(t11.straggler_steps, 4, c, scale=scale, timeout_s=240)
        for c in (cluster, cluster.with_(slow_ranks=((2, 0.5),)))
    ]
    return t11, saves, stragglers


def test_async_checkpoint_stalls_for_the_staging_copy_only(lab11_runs):
    t11, saves, _ = lab11_runs
    nbytes = saves["sync"].results[0]["bytes"]
    sync, asyn = (t11.save_times(saves[m]) for m in ("sync", "async"))
    assert sync["step"] == pytest.approx(asyn["step"], rel=1e-9)  # no save: the same step
    assert sync["stall"] == pytest.approx(nbytes / t11.STORAGE_BYTES_PER_S, rel=1e-6)
    assert asyn["stall"] == pytest.approx(nbytes / t11.STAGING_BYTES_PER_S, rel=1e-6)
    assert asyn["complete"] == pytest.approx(sync["complete"] + asyn["stall"], rel=1e-6)
    assert saves["sync"].results[0]["losses"] == saves["async"].results[0]["losses"]


def test_straggler_sets_every_ranks_pace(lab11_runs):
    from lab_utils.experiments.lab11.faults import find_stragglers

    t11, _, (healthy, slow) = lab11_runs
    fast_c, slow_c = (t11.per_rank_compute(em)[-1] for em in (healthy, slow))
    assert slow_c[2] == pytest.approx(2 * fast_c[2], rel=1e-9)
    assert slow_c[0] == pytest.approx(fast_c[0], rel=1e-9)
    assert find_stragglers(slow_c) == [2] and find_stragglers(fast_c) == []
    for r in range(4):  # every rank's step grows by rank 2's extra compute, within its comm
        extra = slow.step_times(r)[-1] - healthy.step_times(r)[-1]
        assert extra == pytest.approx(slow_c[2] - fast_c[2], rel=0.05)


def test_hsdp_beats_fsdp_across_nodes_and_layouts_rank():
    """Lab 08: across two nodes HSDP's step is shorter than FSDP's over all 8 ranks (its
    per-layer collectives stay on NVLink), with the same losses; the layouts of one global
    batch train the same model, and pure DP is the fastest of them on the emulated clock
    (its cross-node all-reduce is hierarchical) while calc's flat-ring planner ranks it last."""
    from lab_utils.experiments.lab08 import twin as t8

    cluster = twin.Cluster.preset("DGX H100", nodes=2, gpus_per_node=4)
    fsdp, hsdp = (
        twin.emulate(t8.shard_steps, 8, cluster, m, scale=t8.TWIN_SCALE, timeout_s=300)
        for m in ("fsdp", "hsdp")
    )
    assert hsdp.step_times()[-1] < 0.97 * fsdp.step_times()[-1]
    assert hsdp.results[0] == pytest.approx(fsdp.results[0], rel=1e-5)
    runs = {
        k: twin.emulate(t8.layout_steps, 8, cluster, *k, scale=t8.TWIN_SCALE, timeout_s=300)
        for k in ((2, 2, 2), (8, 1, 1))
    }
    assert t8.same_losses(runs.values())
    rows = {r["layout"]: r for r in t8.layout_rows(runs, cluster)}
    assert rows["dp=8 tp=1 pp=1"]["emulated rank"] == 1 == rows["dp=2 tp=2 pp=2"]["planner rank"]


def test_cluster_explorer_reruns_a_real_step_after_a_prediction():
    """Item 8: the learner's choice of cluster re-runs the real pipeline step; the prediction is
    kept beside the emulated time; one stage per node over 10 GbE is slower than NVLink, and
    an impossible choice is a ValueError naming the field."""
    from lab_utils.experiments.lab07 import pp_worker
    from lab_utils.twin.widget import ClusterExplorer

    ex = ClusterExplorer(pp_worker, P, [dict(schedule="1f1b", m=M)], scale=pipeline_scale())
    assert ex.node_counts() == [1, 2, 4]
    one, spread = ex.run("100"), ex.run(100, nodes=4, inter="10GbE")
    assert spread.cluster.inter.name == "10GbE" and spread.cluster.nodes == 4
    assert spread.emulated_ms > 2 * one.emulated_ms and len(ex.history) == 2
    assert one.row()["your prediction (ms)"] == 100.0 and one.verdict
    for bad, field in ((dict(nodes=3), "nodes"), (dict(inter="bogus"), "inter")):
        with pytest.raises(ValueError, match=field):
            ex.run(1, **bad)
    with pytest.raises(ValueError, match="prediction_ms"):
        ex.run(float("nan"))
