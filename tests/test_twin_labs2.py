"""Lessons of labs 07, 08 and 11 on the emulated cluster (lab_utils.twin), asserted on the
EMULATED clock (deterministic: the same numbers on a quiet or a loaded machine), never on wall
time.

Lab 07: every schedule of our pipeline (GPipe, 1F1B, interleaved, ZB-H1, ZB-H2) runs on 4
emulated H100s; its recorded order replays to the formula's bubble, the emulated bubble sits
just above the formula (the head's FLOPs and the messages, both real), interleaving's gain
shrinks when every boundary crosses the network, the last stage is the compute-heavy one, and
torch.distributed.pipelining's schedules run on the same clock with exact gradients.
"""
import pytest

from lab_utils.experiments.lab07 import reference_grads, run_pipeline
from lab_utils.experiments.lab07.pipeline import PP_CONFIG, pipeline_cluster, pipeline_scale
from lab_utils.experiments.lab07.tables import (bubble_formula, in_flight_formula,
                                                measured_bubble, measured_in_flight, stage_costs)
from lab_utils.experiments.lab07.torch_pipeline import replay
from lab_utils.calc.timeline import bubble_from_timeline
from lab_utils.parallel.pipeline_parallel.schedules import SCHEDULES

P, M = 4, 8
ALL = tuple(SCHEDULES)  # gpipe, 1f1b, interleaved, zb-h1, zb-h2


@pytest.fixture(scope="module")
def pipes():
    exps = [dict(schedule=s, m=M) for s in ALL]
    inside = run_pipeline(exps, P, pipeline_cluster(), pipeline_scale(), timeout_s=240)
    across = run_pipeline(exps[:3], P, pipeline_cluster(across_nodes=True), pipeline_scale(),
                          timeout_s=240)
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
            bubble_formula(name, P, M, run.v), abs=1e-12)
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
    loss = {s: measured_bubble(across[s]) - measured_bubble(inside[s])
            for s in ("1f1b", "interleaved")}
    assert loss["interleaved"] > 2 * loss["1f1b"] > 0


def test_last_stage_is_the_compute_hot_spot():
    """With V / C = 64 (GPT-2's ratio) the head makes the LAST stage the slowest on the
    emulated clock; the embedding lookup does no matmul and is charged nothing."""
    from dataclasses import replace

    cfg = replace(PP_CONFIG, vocab_size=2048)
    run = run_pipeline([dict(schedule="gpipe", m=M, cfg=cfg)], P, pipeline_cluster(),
                       pipeline_scale(cfg), timeout_s=240)[0]
    costs = stage_costs(run)
    assert costs[0] == pytest.approx(costs[1], rel=1e-9) == pytest.approx(costs[2], rel=1e-9)
    assert costs[3] > 2 * costs[0]
