"""Lab 03's step-by-step ring (experiments.lab03.ring_trace) against the schedule worked out by
hand, and the who-sends-to-whom matrix of the ring."""

import pytest

from lab_utils import run
from lab_utils.calc import ring_bytes_per_rank
from lab_utils.experiments import lab03


def expected_steps(n):
    """The ring schedule on sets of contributors: reduce-scatter adds, all-gather copies."""
    held = [[{r} for _ in range(n)] for r in range(n)]  # held[r][c]: ranks summed in chunk c
    steps = [("start", [None] * n, held)]
    for s in range(n - 1):
        sent = [(r - s - 1) % n for r in range(n)]
        new = [[set(c) for c in row] for row in held]
        for r in range(n):  # rank r receives chunk (r-s-2) % n from its left neighbour
            left = (r - 1) % n
            new[r][(r - s - 2) % n] |= held[left][sent[left]]
        held = new
        steps.append((f"RS step {s}", sent, held))
    for s in range(n - 1):
        sent = [(r - s) % n for r in range(n)]
        new = [[set(c) for c in row] for row in held]
        for r in range(n):
            left = (r - 1) % n
            new[r][(r - s - 1) % n] = set(held[left][sent[left]])
        held = new
        steps.append((f"AG step {s}", sent, held))
    return [(label, sent, [[sorted(c) for c in row] for row in h]) for label, sent, h in steps]


@pytest.mark.parametrize("n", [3, 4])
def test_ring_trace_follows_the_schedule(n):
    trace = run(lab03.ring_trace, n, backend="gloo", quiet=True)[0]
    assert trace.n == n
    assert trace.steps == expected_steps(n)
    assert all(c == list(range(n)) for row in trace.steps[-1][2] for c in row)


def test_our_ring_sends_everything_to_the_right_neighbour():
    n, numel = 4, 3 * 2**14
    matrices = run(lab03.who_sends_to_whom, n, numel, ("ring",), backend="gloo", quiet=True)[0]
    ring = matrices[0].matrix
    if not any(any(row) for row in ring):
        pytest.skip("no per-peer byte counters on this platform")
    per_rank = ring_bytes_per_rank("all_reduce", n, 4 * numel)
    for i, row in enumerate(ring):
        assert 0 <= row[(i + 1) % n] - per_rank < 48 * 16 * (n - 1)  # data + gloo headers
        assert sum(row) - row[(i + 1) % n] < 0.01 * per_rank  # "ready" headers only
