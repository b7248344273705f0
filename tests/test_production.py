"""Lab 11 on real ranks: crash + exact resume, resharding 4 -> 2, a hang named, a NaN found.

Launches: crash (4 ranks), checkpoint drill (4), reshard (2), hang (3), fault drills (4).
"""
import os

import pytest

from lab_utils import RankFailure, run
from lab_utils.exercises.find_the_hang import expect_hang, hang_uneven
from lab_utils.experiments.lab11 import RunConfig, checkpoint_drill, fault_drills, reshard_load, train_run

CFG = RunConfig(steps=6, ckpt_every=2)
CRASH = (2, 4)          # rank 2 dies in step 4, just after the step-4 checkpoint was written


@pytest.fixture(scope="module")
def drill(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab10")
    good, crashed = str(root / "good"), str(root / "crashed")
    with pytest.raises(RankFailure) as failure:
        run(train_run, 4, CFG, crashed, crash=CRASH, backend="gloo", timeout_s=240, quiet=True)
    results = run(checkpoint_drill, 4, CFG, good, crashed, 4, backend="gloo", timeout_s=300,
                  quiet=True)
    return failure.value, results, good


def test_crash_is_reported_and_resume_is_bitwise_equal(drill):
    failure, results, _ = drill
    assert CRASH[0] not in failure.tracebacks        # the dead rank left no traceback ...
    assert any(line.startswith(f"[rank {CRASH[0]}] simulated crash") for line in failure.log)
    res = results[0]
    assert res["resumed_from"] == "step_000004"
    expected = {s: res["uninterrupted"][s] for s in range(4, CFG.steps)}
    assert res["resumed"] == expected                # float ==: bitwise, on CPU
    assert res["no RNG"] != expected                 # dropout masks differ without the RNG state
    assert res["no data position"] != expected       # other batches without the loader state
    assert all(r["resumed"] == expected for r in results)


def test_reshard_4_to_2_gives_the_same_state_and_loss(drill):
    _, results, good = drill
    path = os.path.join(good, "step_000004")
    loaded = run(reshard_load, 2, CFG, path, backend="gloo", timeout_s=240, quiet=True)
    for r in loaded:
        assert r["step"] == 4 and r["data"] == {"epoch": 1, "pos": 8}
        assert r["eval"] == results[0]["evals"][4]   # the loss before saving, bitwise
        assert r["fingerprint"] == results[0]["fingerprint"]   # every weight and Adam moment


def test_sharded_save_spreads_bytes_rank0_save_concentrates_them(drill):
    _, results, _ = drill
    saves = [r["saves"] for r in results]
    files = saves[0]["files"]
    assert {f"__{r}_0.distcp" for r in range(4)} | {".metadata"} == set(files)
    assert saves[0]["full_file"] > 0
    assert all(s["full_file"] == 0 and s["held_full"] == 0 for s in saves[1:])
    shards = sum(s["held_sharded"] for s in saves)      # each rank: its quarter (+ Adam's steps)
    assert abs(saves[0]["held_full"] - shards) < 0.01 * saves[0]["held_full"]


def test_hang_drill_names_the_rank_with_the_extra_batch():
    exc = expect_hang(hang_uneven, 3, 10, extra_rank=1)
    assert exc.unfinished == [1]
    assert "hang_uneven" in str(exc) and "all_reduce" in str(exc)


def test_nan_guard_finds_rank_and_sample_and_divergence_is_detected():
    results = run(fault_drills, 4, steps=3, bad=(2, 1, 3), backend="gloo", timeout_s=120,
                  quiet=True)
    for r in results:
        plain, guarded = r["nan_plain"], r["nan_guarded"]
        assert plain[0]["params_finite"] and not plain[1]["params_finite"]   # every rank poisoned
        assert [h["skipped"] for h in guarded] == [None, {"rank": 2, "sample": 3}, None]
        assert all(h["params_finite"] for h in guarded)
        assert all(len(set(step)) == 4 for step in r["diverged"]["checksums"])
        assert all(len(set(step)) == 1 for step in r["synced"]["checksums"])
