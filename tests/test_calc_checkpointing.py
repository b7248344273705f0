"""Chen et al. 2016: activation checkpointing in sqrt(n) segments (lab 02)."""

import math

import pytest

from lab_utils.calc import checkpoint_segments, optimal_segments


def test_memory_is_k_inputs_plus_one_segment():
    plan = checkpoint_segments(16, 4)
    assert (plan.segment_layers, plan.memory, plan.memory_without) == (4, 8.0, 16.0)
    assert plan.saving == 2.0
    assert checkpoint_segments(16, 1).memory == 1 + 16  # one segment: everything again
    assert checkpoint_segments(16, 16).memory == 16 + 1  # every input kept
    assert checkpoint_segments(10, 3).segment_layers == 4  # ceil(10/3)


def test_recompute_is_one_extra_forward_whatever_k():
    # Chen et al. Sec. 4.1: each segment is re-run once = one more forward = 1/3 of a step
    # when the backward costs two forwards (the syllabus's "~33% more compute").
    for k in (1, 2, 4, 16):
        plan = checkpoint_segments(16, k)
        assert plan.recompute_layers == 16 and plan.extra_compute == pytest.approx(1 / 3)


@pytest.mark.parametrize("n", [4, 9, 16, 25, 64, 100, 96, 1024])
def test_optimum_is_sqrt_n(n):
    k = optimal_segments(n)
    assert abs(k - math.sqrt(n)) <= 2
    assert checkpoint_segments(n, k).memory <= 2 * math.ceil(math.sqrt(n)) + 1
    best = min(checkpoint_segments(n, j).memory for j in range(1, n + 1))
    assert checkpoint_segments(n, k).memory == best  # exact over every k


def test_optimum_weighs_inputs_against_internals():
    # A layer saving 16x its input (a = 1, A = 16): k* = sqrt(n A / a) = 4 sqrt(n).
    assert optimal_segments(64, input_bytes=1.0, layer_bytes=16.0) == 32
    assert optimal_segments(64, input_bytes=16.0, layer_bytes=1.0) == 2
