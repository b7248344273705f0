"""measure.step_memory + viz.memory_timeline: the memory of training steps, event by event."""

import pytest

from lab_utils.experiments.lab01 import saved_bytes, step_memory
from lab_utils.models import GPTConfig, TinyGPT
from lab_utils.viz.memory_timeline import memory_timeline_figure, phase_spans


def test_one_step_ramps_releases_and_allocates_state_once():
    cfg = GPTConfig()
    points = step_memory(cfg, steps=2, batch=4)
    p_bytes = 4 * sum(p.numel() for p in TinyGPT(cfg).parameters())
    by = {(p.step, p.label): p for p in points}
    assert all(p.params == p_bytes for p in points)
    assert by[1, "step begins"].total == p_bytes  # nothing else yet
    forward = [p.activations for p in points if p.step == 1 and p.phase == "forward"]
    assert forward == sorted(forward) and forward[-1] > 0  # the forward ramp
    # the model's forward saves what saved_bytes measures; the token ids saved by the embedding
    # are a view of a (4, seq_len + 1) int64 batch here: one more token of 8 bytes per row
    assert by[1, "head (logits)"].activations == saved_bytes(TinyGPT(cfg), 4, cfg.seq_len) + 4 * 8
    assert by[1, "loss"].activations > by[1, "head (logits)"].activations  # the loss saves too
    done = by[1, "backward done"]
    assert done.activations == 0 and done.grads == p_bytes and done.optimizer == 0
    assert by[1, "optimizer.step()"].optimizer == 2 * p_bytes  # AdamW m, v: first step
    assert by[1, "zero_grad()"].grads == 0
    assert by[2, "step begins"].optimizer == 2 * p_bytes  # state stays
    assert by[2, "optimizer.step()"].total == by[1, "optimizer.step()"].total


def test_memory_timeline_figure_stacks_four_kinds_and_shades_phases():
    points = step_memory(GPTConfig(), steps=1, batch=2)
    fig = memory_timeline_figure(points, unit="KB")
    assert [t.name for t in fig.data] == [
        "parameters",
        "gradients",
        "optimizer state",
        "saved activations",
    ]
    assert len(fig.data[0].x) == len(points)
    assert [s[3] for s in phase_spans(points)] == [
        "start",
        "forward",
        "backward",
        "optimizer",
        "zero_grad",
    ]
    with pytest.raises(ValueError, match="unit"):
        memory_timeline_figure(points, unit="parsecs")
    with pytest.raises(ValueError, match="no memory points"):
        memory_timeline_figure([])
