"""Lab 11 on real ranks: an elastic restart under torchrun that resumes bitwise, resharding
4 -> 2, sync vs async saves, a straggler named, a hung job's stacks and flight recorder, a hang
named by the course launcher, a NaN found, drifting replicas caught.

No timing asserts: where a time appears, the check is a lower bound a sleep guarantees.
Launches: torchrun elastic (2 ranks, 2 attempts), reference (2), checkpoint drill (4),
reshard (2), save stall (2), hung job under torchrun (2), hang (3), fault drills (4).
"""

import os
import signal
import time

import pytest

from lab_utils import run
from lab_utils.exercises.find_the_hang import expect_hang, hang_uneven
from lab_utils.experiments.lab11 import (
    RunConfig,
    checkpoint_drill,
    elastic,
    faults,
    latest_checkpoint,
    reshard_load,
    train_run,
)

CFG = RunConfig(steps=6, ckpt_every=2)


@pytest.fixture(scope="module")
def elastic_job(tmp_path_factory):
    root = tmp_path_factory.mktemp("elastic")
    ckpt, events = str(root / "ckpt"), str(root / "events")
    job = elastic.torchrun_job(
        "elastic_train.py",
        2,
        str(root / "torchrun"),
        max_restarts=1,
        args=(
            "--root",
            ckpt,
            "--log-dir",
            events,
            "--steps",
            "6",
            "--ckpt-every",
            "2",
            "--crash",
            "1:5",
        ),
        timeout_s=400,
    )
    return job, elastic.read_elastic_log(events), ckpt


def test_elastic_restart_resumes_bitwise(elastic_job):
    job, report, ckpt = elastic_job
    assert job.returncode == 0, "\n".join(job.agent_log[-20:])
    assert report.attempts == 2 and (report.crash_rank, report.crash_step) == (1, 5)
    assert report.resumed_from == "step_000004" and report.lost_steps == 1
    assert report.lost_work_s > 0 and report.restart_s > 0 and report.reload_s > 0
    assert latest_checkpoint(ckpt).endswith("step_000006")  # attempt 1 kept checkpointing
    reference = run(train_run, 2, CFG, None, backend="gloo", timeout_s=300, quiet=True, threads=1)[
        0
    ]  # as in the torchrun job
    assert report.losses == reference.losses  # float ==: bitwise, every step
    assert "simulated crash" in elastic.rank_log(job.log_dir, 1, 0, "stdout")


@pytest.fixture(scope="module")
def drill(tmp_path_factory):
    root = tmp_path_factory.mktemp("drill")
    crashed = str(root / "crashed")
    run(
        train_run,
        4,
        RunConfig(steps=4, ckpt_every=2),
        crashed,
        backend="gloo",
        timeout_s=300,
        quiet=True,
    )  # a 4-rank checkpoint at step 4 to resume from
    results = run(
        checkpoint_drill,
        4,
        CFG,
        str(root / "good"),
        os.path.join(crashed, "step_000004"),
        4,
        backend="gloo",
        timeout_s=300,
        quiet=True,
    )
    return results, str(root / "good")


def test_incomplete_resumes_differ_and_ranks_agree(drill):
    results, _ = drill
    res = results[0]
    assert res.resumed_from == "step_000004"
    expected = {s: res.uninterrupted[s] for s in range(4, CFG.steps)}
    assert res.no_rng != expected  # dropout masks differ without the RNG state
    assert res.no_data != expected  # other batches without the loader state
    assert all(r.uninterrupted == res.uninterrupted for r in results)


def test_reshard_4_to_2_gives_the_same_state_and_loss(drill):
    results, good = drill
    loaded = run(
        reshard_load,
        2,
        CFG,
        os.path.join(good, "step_000004"),
        backend="gloo",
        timeout_s=240,
        quiet=True,
    )
    for r in loaded:
        assert r.step == 4 and r.data == {"epoch": 1, "pos": 8}
        assert r.eval == results[0].evals[4]  # the loss before saving, bitwise
        assert r.fingerprint == results[0].fingerprint  # every weight and Adam moment


def test_sharded_save_spreads_bytes_rank0_save_concentrates_them(drill):
    saves = [r.saves for r in drill[0]]
    assert {f"__{r}_0.distcp" for r in range(4)} | {".metadata"} == set(saves[0].files)
    assert saves[0].full_file > 0
    assert all(s.full_file == 0 and s.held_full == 0 for s in saves[1:])
    shards = sum(s.held_sharded for s in saves)  # each rank: its quarter (+ Adam's steps)
    assert abs(saves[0].held_full - shards) < 0.01 * saves[0].held_full


def test_sync_and_async_saves_write_complete_checkpoints(tmp_path):
    out = run(
        elastic.save_stall,
        2,
        str(tmp_path),
        steps=4,
        every=2,
        backend="gloo",
        timeout_s=300,
        quiet=True,
        preload=("torch._dynamo",),
    )
    for per_rank in out:
        assert [s.mode for s in per_rank] == ["sync", "async"]
        for s in per_rank:
            assert len(s.stall_s) == len(s.complete_s) == 2 and s.bytes_per_rank > 0
            assert all(c >= 0 for c in s.complete_s)
    for mode in ("sync", "async"):
        for step in (2, 4):
            assert os.path.exists(tmp_path / f"{mode}_step{step}" / ".metadata")


def test_straggler_is_the_rank_whose_compute_is_long():
    results = run(
        faults.straggler_drill,
        3,
        steps=4,
        t_compute=0.02,
        slow_rank=1,
        slowdown=3.0,
        from_step=2,
        backend="gloo",
        timeout_s=120,
        quiet=True,
    )
    log = results[0]
    assert all(r.compute_s == log.compute_s for r in results)  # all-gathered: the same table
    for s in (2, 3):  # a sleep never ends early: an exact lower bound, not a timing guess
        assert log.compute_s[s][1] >= 0.06
    assert faults.find_stragglers([0.02, 0.061, 0.021]) == [1]
    assert faults.find_stragglers([0.02, 0.021, 0.02]) == []


def test_hung_job_stacks_and_flight_recorder(tmp_path):
    job = elastic.HungJob(2, str(tmp_path), env={"TORCH_FR_BUFFER_SIZE": "200"})
    try:
        job.wait_until_stuck(timeout_s=180)
        job.signal_all(signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"{faults.FR_PREFIX}{r}").exists() for r in range(2)):
            assert time.monotonic() < deadline, "the watchdogs did not dump the flight recorder"
            time.sleep(0.1)
        time.sleep(0.3)
    finally:
        job.stop()
    frames = {r: elastic.stack_frames(elastic.rank_log(job.log_dir, r)) for r in range(2)}
    assert frames[0][0].endswith("in all_reduce") and frames[1][0].endswith("in barrier")
    dumps = {
        r: faults.read_flight_recorder(str(tmp_path / f"{faults.FR_PREFIX}{r}")) for r in range(2)
    }
    rows = faults.flight_record_rows(dumps)
    assert "all_reduce [[1]]" in rows[0]["pending collective"]
    assert "barrier" in rows[1]["pending collective"]
    assert faults.first_mismatch(dumps).startswith("collective #")


def test_hang_drill_names_the_rank_with_the_extra_batch():
    exc = expect_hang(hang_uneven, 3, 10, extra_rank=1)
    assert exc.unfinished == [1]
    assert "hang_uneven" in str(exc) and "all_reduce" in str(exc)


def test_nan_guard_finds_rank_and_sample_and_divergence_is_detected():
    results = run(
        faults.fault_drills,
        4,
        steps=3,
        bad=(2, 1, 3),
        straggler=dict(steps=2, t_compute=0.01),
        backend="gloo",
        timeout_s=120,
        quiet=True,
    )
    for r in results:
        assert r.nan_plain[0].params_finite and not r.nan_plain[1].params_finite
        assert [h.skipped for h in r.nan_guarded] == [None, {"rank": 2, "sample": 3}, None]
        assert all(h.params_finite for h in r.nan_guarded)
        assert all(len(set(step)) == 4 for step in r.diverged.checksums)
        assert all(len(set(step)) == 1 for step in r.synced.checksums)


def test_checkpoint_size_row_whole_and_per_rank():
    from lab_utils.experiments.lab11 import checkpoint_size_row

    row = checkpoint_size_row("m", 10**9, 12, 4)
    assert row == {
        "model": "m",
        "params": 10**9,
        "B/param": 12,
        "checkpoint": "12.0 GB",
        "per rank, sharded": "3.0 GB",
    }
    kb = checkpoint_size_row("tiny", 1000, 16, 4, lambda b: f"{b / 1e3:.0f} kB")
    assert (kb["checkpoint"], kb["per rank, sharded"]) == ("16 kB", "4 kB")


def test_resume_figure_one_line_per_run_and_the_resume_mark():
    from lab_utils.viz.resume_plots import resume_figure

    fig = resume_figure({"uninterrupted": {0: 2.0, 1: 1.5}, "elastic": {1: 1.5}}, resume_at=1)
    assert [t.name for t in fig.data] == ["uninterrupted", "elastic"]
    assert list(fig.data[0].x) == [0, 1] and fig.data[1].line.dash == "dot"
    assert fig.layout.shapes[0].x0 == 0.5
