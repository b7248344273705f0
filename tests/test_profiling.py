"""lab_utils.profiling: real traces of a 4-rank data-parallel step, read from the files; the
reading checked against hand-computed intervals and against the emulator's own bookkeeping;
bad trace files refused with the file and what is missing."""

from __future__ import annotations

import json
import os

import pytest
import torch

from lab_utils import run, twin
from lab_utils.models import GPTConfig, TinyGPT
from lab_utils.profiling import (
    TraceError,
    figure,
    gantt_events,
    load_trace,
    load_traces,
    rank_timelines,
    read,
    trace_folder,
)

CFG = GPTConfig(vocab_size=64, seq_len=16, n_layer=2, n_head=2, d_model=32)


@pytest.fixture(scope="module")
def traced():
    from lab_utils.experiments.lab13 import ddp_traces

    with trace_folder() as folder:
        runs = run(ddp_traces, 4, folder, CFG, 2, 1, 2**14, quiet=True, timeout_s=120)[0]
        files = {impl: load_traces(r.paths) for impl, r in runs.items()}
        yield runs, files, folder
    assert not os.path.exists(folder), "trace_folder must remove its traces"


def test_one_trace_per_rank_read_from_the_files(traced):
    runs, files, _ = traced
    for impl, loaded in files.items():
        assert sorted(f.rank for f in loaded) == [0, 1, 2, 3], impl
        assert all(f.producer == "torch.profiler" for f in loaded)
        for t, r in zip(rank_timelines(loaded), read(rank_timelines(loaded))):
            assert t.compute and t.comm, f"{impl} rank {t.rank}: no compute or no collective"
            assert len(t.steps) == 1  # one ProfilerStep#k per profiled step
            assert any(name.startswith("gloo:all_reduce") for _, _, name in t.comm)
            lo, hi = t.window
            assert r.compute_s + r.idle_s == pytest.approx(hi - lo)
            assert r.overlapped_s + r.exposed_s == pytest.approx(r.comm_s)
            assert 0.0 <= r.overlap_fraction <= 1.0 and r.gap[0] <= r.gap[1]
        assert runs[impl].own_overlap is not None  # our own spans, for comparison
    events = gantt_events(rank_timelines(files["bucket"]))
    assert {e["lane"] for e in events} == {"compute", "comm"}
    assert {e["rank"] for e in events} == {0, 1, 2, 3}
    assert figure(rank_timelines(files["bucket"])).data


def test_fsdp_ours_and_fsdp2_prefetch_off_and_on_read_from_their_traces():
    """Prefetch moves all-gathers earlier; it does not add or drop any: the count of gloo
    all-gathers per rank is the same with prefetch off and on (ours and FSDP2)."""
    from lab_utils.experiments.lab13 import FSDP_VARIANTS, fsdp_traces

    with trace_folder() as folder:
        runs = run(fsdp_traces, 4, folder, CFG, 2, 1, quiet=True, timeout_s=120)[0]
        loaded = {v: load_traces(paths) for v, paths in runs.items()}
    assert list(loaded) == list(FSDP_VARIANTS)
    gathers = {}
    for variant, files in loaded.items():
        timelines = rank_timelines(files)
        gathers[variant] = [sum(n == "gloo:all_gather" for _, _, n in t.comm) for t in timelines]
        for r in read(timelines):
            assert r.comm_s > 0 and r.overlapped_s + r.exposed_s == pytest.approx(r.comm_s)
    assert gathers["ours"] == gathers["ours prefetch"] and min(gathers["ours"]) > 0
    assert gathers["FSDP2"] == gathers["FSDP2 prefetch"] and min(gathers["FSDP2"]) > 0


def test_a_pipeline_schedule_reads_as_point_to_point_waits():
    """1F1B over m = 4 micro-batches on 4 stages: each stage sends m activations forward (not
    the last) and m gradients backward (not the first), and receives as many; a gap spent in a
    send or receive is read as waiting for a pipeline neighbour."""
    from lab_utils.experiments.lab13 import pipeline_trace

    with trace_folder() as folder:
        files = load_traces(run(pipeline_trace, 4, folder, "1f1b", 4, quiet=True, timeout_s=120)[0])
    timelines = rank_timelines(files)
    for t, r in zip(timelines, read(timelines)):
        names = [n for _, _, n in t.comm]
        expected = 4 * (t.rank < 3) + 4 * (t.rank > 0)
        assert names.count("gloo:send") == names.count("gloo:recv") == expected, t.rank
        if "gloo:send" in r.gap_cause or "gloo:recv" in r.gap_cause:
            assert "pipeline neighbour" in r.gap_cause


def _kineto(path, rank, events):
    with open(path, "w") as f:
        json.dump(
            dict(
                schemaVersion=1, distributedInfo=dict(rank=rank, world_size=2), traceEvents=events
            ),
            f,
        )
    return str(path)


def _x(name, ts, dur, tid, cat="cpu_op"):
    return dict(ph="X", cat=cat, name=name, ts=ts, dur=dur, pid=1, tid=tid)


def test_reading_matches_hand_computed_intervals(tmp_path):
    """Rank 0 computes [0,40] and [60,100] us; its all-reduce runs [30,80] on gloo's thread:
    overlapped 10 + 20 = 30 us, exposed 20, idle 20 (the gap [40,60]), waiting for rank 1,
    whose all-reduce starts 25 us later (it computed until 55)."""
    a = _kineto(
        tmp_path / "r0.json",
        0,
        [
            _x("ProfilerStep#1", 0, 100, 7, "user_annotation"),
            _x("aten::mm", 0, 40, 7),
            _x("aten::add", 5, 10, 7),  # nested: counted once
            _x("c10d::allreduce_", 29, 1, 7),
            _x("gloo:all_reduce", 30, 50, 9, "user_annotation"),
            _x("aten::mm", 60, 40, 7),
        ],
    )
    b = _kineto(
        tmp_path / "r1.json",
        1,
        [
            _x("ProfilerStep#1", 0, 100, 7, "user_annotation"),
            _x("aten::mm", 0, 55, 7),
            _x("gloo:all_reduce", 55, 25, 9, "user_annotation"),
            _x("aten::mm", 80, 20, 7),
        ],
    )
    r0 = read(rank_timelines(load_traces([a, b])))[0]
    us = 1e-6
    assert r0.compute_s == pytest.approx(80 * us)
    assert r0.comm_s == pytest.approx(51 * us)  # the launch [29, 30] counts too
    assert r0.overlapped_s == pytest.approx(31 * us)
    assert r0.exposed_s == pytest.approx(20 * us)
    assert r0.overlap_fraction == pytest.approx(31 / 51)
    assert r0.gap == (pytest.approx(40 * us), pytest.approx(60 * us))
    assert "for rank 1" in r0.gap_cause and "gloo:all_reduce #0" in r0.gap_cause


def test_the_emulators_trace_reads_like_its_own_bookkeeping(tmp_path):
    from tests.test_twin_ddp import CLUSTER, ddp_steps  # 3 DDPs on a slow 2 x 2 cluster

    em = twin.emulate(ddp_steps, 4, CLUSTER, 1, quiet=True, timeout_s=120)
    path = str(tmp_path / "twin.json")
    twin.chrome_trace(em, path)
    loaded = load_traces([path])
    assert loaded[0].producer == "twin" and loaded[0].rank is None
    readings = read(rank_timelines(loaded))
    assert [r.rank for r in readings] == [0, 1, 2, 3]
    for r in readings:
        assert r.clock == "emulated"
        assert r.compute_s == pytest.approx(em.busy(r.rank, "compute"), rel=1e-6)
        assert r.comm_s == pytest.approx(em.busy(r.rank, "comm") + em.busy(r.rank, "p2p"), rel=1e-6)
        assert r.overlapped_s == pytest.approx(em.overlap(r.rank), rel=1e-6)


def test_bad_trace_files_name_the_file_and_what_is_missing(tmp_path):
    with pytest.raises(TraceError, match=r"nope\.json: no such trace file"):
        load_trace(str(tmp_path / "nope.json"))
    good = _kineto(tmp_path / "cut.json", 0, [_x("aten::mm", 0, 4, 1)])
    text = open(good).read()
    open(good, "w").write(text[: len(text) // 2])
    with pytest.raises(TraceError, match=r"cut\.json: truncated or corrupt JSON"):
        load_trace(good)
    (tmp_path / "other.json").write_text(json.dumps({"events": []}))
    with pytest.raises(TraceError, match=r"other\.json: not a Chrome trace.*'traceEvents'"):
        load_trace(str(tmp_path / "other.json"))
    (tmp_path / "old.json").write_text(json.dumps({"traceEvents": [_x("aten::mm", 0, 4, 1)]}))
    with pytest.raises(TraceError, match=r"old\.json: .*lacks 'schemaVersion'.*another torch"):
        load_trace(str(tmp_path / "old.json"))
    (tmp_path / "empty.json").write_text("")
    with pytest.raises(TraceError, match=r"empty\.json: the file is empty"):
        load_trace(str(tmp_path / "empty.json"))
    same = _kineto(tmp_path / "same.json", 0, [_x("aten::mm", 0, 4, 1)])
    with pytest.raises(TraceError, match="both claim rank 0"):
        load_traces([good.replace("cut", "same"), same])


def test_an_empty_profile_says_the_profiler_saw_no_step(tmp_path):
    """A REAL profile with nothing inside (the step ran before the profiler started)."""
    from torch.profiler import ProfilerActivity, profile

    torch.ones(3).sum()  # "the step", before the profiler
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        pass
    path = str(tmp_path / "late.json")
    prof.export_chrome_trace(path)
    with pytest.raises(TraceError, match=r"late\.json: an empty profile.*started after"):
        load_trace(path)


def test_flop_counter_equals_the_megatron_formula_with_and_without_recomputation():
    """FlopCounterMode on TinyGPT's forward + backward: 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
    exactly; with every block checkpointed, the full-recompute count 96 B s l h^2 (...)."""
    from lab_utils.calc.flops import megatron_hardware_flops, megatron_model_flops
    from lab_utils.experiments.lab02.memory import forward
    from lab_utils.experiments.lab13.mfu import count_flops

    cfg = GPTConfig(vocab_size=96, seq_len=24, n_layer=3, n_head=2, d_model=32)
    x = torch.randint(0, cfg.vocab_size, (3, cfg.seq_len))
    shape = dict(batch=3, seq_len=24, n_layers=3, hidden=32, vocab_size=96)
    model = TinyGPT(cfg)
    assert count_flops(model, x, x) == pytest.approx(megatron_model_flops(**shape), rel=1e-12)
    full = count_flops(model, x, x, lambda m, i: forward(m, i, k=1))
    assert full == pytest.approx(megatron_hardware_flops(**shape, recompute="full"), rel=1e-12)


def test_profiled_memory_peak_beside_lab01s_ledger(tmp_path):
    """The profiler sees what the ledger books (params, grads, AdamW state, saved activations)
    plus temporaries inside operations: its peak is at least the ledger's, and close to it."""
    from lab_utils.experiments.lab13.memory import memory_timeline

    m = memory_timeline(CFG, 4, 2, str(tmp_path))
    assert m.param_bytes == sum(p.numel() * 4 for p in TinyGPT(CFG).parameters())
    assert m.held_bytes[0] >= m.param_bytes and len(m.times_s) == len(m.held_bytes)
    assert m.ledger_peak <= m.peak <= 1.5 * m.ledger_peak, (m.peak, m.ledger_peak)
    assert "step 2" in m.ledger_label  # the optimizer state exists from step 1 on
