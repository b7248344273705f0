"""Lab 10's worker functions (lab_utils/experiments/lab10.py): one 2-rank launch, plus in-process parts.

Timings on a shared CPU are noisy, so the checks are about structure and about what physics
guarantees: a sleep of t lasts at least t, strong scaling computes the same losses at every N,
the CommLedger's bytes equal the ring formula exactly, a 16x16 matmul runs far below a 128x128.
"""
import sys

import cloudpickle
import pytest
import torch

from lab_utils import run
from lab_utils.calc import bubble, bubble_from_timeline, ring_bytes_per_rank
from lab_utils.experiments.lab10 import (SCALING_CONFIG, SlowDataset, background_prefetch, comm_split,
                                   loader_experiment, matmul_rates)

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests/ is not importable in ranks
SIM_ROW_S = 0.002
MODES = ("strong", "weak", "sim_strong", "sim_weak")


def _both(ctx):
    from lab_utils.experiments.lab10 import bottleneck_worker, scaling_worker
    return (scaling_worker(ctx, [1, 2], global_batch=8, per_rank_batch=4, steps=2,
                           sim_row_s=SIM_ROW_S),
            bottleneck_worker(ctx, steps=2, bubble_ms=(2, 4), t_f=0.01))


@pytest.fixture(scope="module")
def launched():
    return run(_both, 2, threads=1, quiet=True, timeout_s=240, preload=("torch._dynamo",))


def test_scaling_structure(launched):
    res, other = launched[0][0], launched[1][0]
    assert other is None, "only rank 0 reports the scaling runs"
    assert set(res) == {(m, n) for m in MODES for n in (1, 2)}
    for (mode, n), r in res.items():
        rows = 8 // n if mode.endswith("strong") else 4
        assert (r["n"], r["rows"]) == (n, rows), (mode, n)
        assert r["tokens"] == n * rows * SCALING_CONFIG.seq_len
        assert len(r["steps_s"]) == 2 and r["step_s"] == min(r["steps_s"]) > 0
        assert r["cpu_s"] > 0 and 0 <= r["comm_s"] <= r["step_s"]
        if mode.startswith("sim"):  # the simulated device sleeps rows x t_row every step
            assert r["step_s"] >= rows * SIM_ROW_S
            assert r["losses"] == []
        else:
            assert len(r["losses"]) == 3  # warm-up + 2 timed steps


def test_strong_scaling_computes_the_same_thing(launched):
    res = launched[0][0]
    # same global batch, averaged gradients: one rank or two, the same training run
    torch.testing.assert_close(torch.tensor(res[("strong", 2)]["losses"]),
                               torch.tensor(res[("strong", 1)]["losses"]), rtol=1e-5, atol=1e-5)
    # weak scaling at N=2 trains on a different (twice larger) global batch
    assert res[("weak", 2)]["losses"] != res[("weak", 1)]["losses"]


def test_comm_vs_compute(launched):
    per_rank = [launched[r][1] for r in range(2)]
    for name in ("compute-bound", "communication-bound"):
        for r in per_rank:
            assert r[name]["calls"] == 1
            assert r[name]["bytes_sent"] == ring_bytes_per_rank("all_reduce", 2,
                                                                r[name]["grad_bytes"])
            assert len(r[name]["spans"]) == 2
            assert {e["name"] for e in r[name]["events"]} == {"compute", "all_reduce"}
        split = comm_split([r[name] for r in per_rank])
        assert 0 < split["comm_fraction"] < 1
    assert per_rank[0]["communication-bound"]["grad_bytes"] > \
        20 * per_rank[0]["compute-bound"]["grad_bytes"]


def test_pipeline_bubble_measured(launched):
    measured = {}
    for m in (2, 4):
        events = [e for r in range(2) for e in launched[r][1]["pipeline"][m]]
        assert {e["rank"] for e in events} == {0, 1}
        measured[m] = bubble_from_timeline(events).mean
        # overheads only ADD idle time to the schedule's own bubble
        assert measured[m] > 0.8 * bubble("1f1b", 2, m).of_total
    assert measured[4] < measured[2]


def test_comm_split_picks_transfer_and_slowest_compute():
    a = {"spans": [{"compute": 1.0, "all_reduce": 0.5}, {"compute": 0.8, "all_reduce": 0.9}]}
    b = {"spans": [{"compute": 1.2, "all_reduce": 0.3}, {"compute": 0.7, "all_reduce": 0.4}]}
    got = comm_split([a, b])
    assert got["compute_s"] == 0.8 and got["comm_s"] == 0.3
    assert got["comm_fraction"] == pytest.approx(0.3 / 1.1)


def test_small_matmuls_are_less_efficient():
    rates = matmul_rates((16, 128), min_cpu_s=0.01, repeats=2)
    assert [r["n"] for r in rates] == [16, 128]
    assert rates[0]["flops"] == 2 * 16**3
    assert rates[1]["flops_per_s"] > 2 * rates[0]["flops_per_s"]


def test_prefetch_hides_a_slow_loader():
    ds = SlowDataset(6, 4, SCALING_CONFIG, delay_s=0.03)
    serial = loader_experiment(ds[i] for i in range(len(ds)))
    ahead = loader_experiment(background_prefetch(ds[i] for i in range(len(ds))))
    assert serial["n"] == ahead["n"] == 5
    assert serial["wait_s"] >= 0.03  # every batch costs its sleep
    assert ahead["step_s"] < serial["step_s"]


def test_background_prefetch_keeps_order():
    assert list(background_prefetch(iter(range(10)), depth=3)) == list(range(10))
