"""The launcher: results come back, failures and hangs end cleanly, nothing is left behind."""

import os
import queue
import subprocess
import sys
import threading
import time
import types

import pytest
import torch
import torch.distributed as dist

from lab_utils import RankFailure, RankTimeout, run
from lab_utils.runtime.engine import pool as pools
from lab_utils.runtime.engine.jobs import wait_for_ranks
from lab_utils.runtime.engine.pool import current as current_pool
from lab_utils.runtime.launch import oversubscription_note

OWNER = "LAB_UTILS_TEST_OWNER"
os.environ[OWNER] = str(os.getpid())  # inherited by every agent and rank this process starts
pytestmark = pytest.mark.usefixtures("own_zygote")  # ranks are found by their start-up environment


def worker_pids() -> list[int]:
    """PIDs of agents and ranks that THIS test process started and that still run, other than its
    warm pool and the spare a failure starts (ranks meant to stay; both run in their own folder,
    which is on their command line). Other test workers' and notebooks' ranks do not count: they
    do not carry this process's mark."""
    keep = [p.run_dir.encode() for p in (current_pool(), pools._SPARE) if p is not None]
    mark = f"{OWNER}={os.getpid()}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
                if b"lab_utils/runtime/worker.py" not in cmdline or any(k in cmdline for k in keep):
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(pid))
    return found


def no_workers_left(within_s: float = 5.0) -> bool:
    """True once no worker process remains (a SIGKILLed rank can linger for a moment)."""
    deadline = time.time() + within_s
    while worker_pids() and time.time() < deadline:
        time.sleep(0.1)
    return worker_pids() == []


def sum_of_ranks(ctx, scale, offset=0.0):
    t = torch.tensor([float(ctx.rank) * scale + offset])
    dist.all_reduce(t, group=ctx.group)
    return {"rank": ctx.rank, "world": ctx.world_size, "sum": t.item(), "device": str(ctx.device)}


def test_results_by_rank_with_args_and_kwargs():
    results = run(sum_of_ranks, 4, 2.0, offset=1.0, quiet=True)
    expected_sum = sum(2.0 * r + 1.0 for r in range(4))
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    assert all(
        r["world"] == 4 and r["sum"] == expected_sum and r["device"] == "cpu" for r in results
    )
    assert results.backend == "gloo" and results.world_size == 4 and results.clean_exit
    assert results.elapsed_s > 0


def test_function_defined_in_a_cell_travels_by_value():
    # Like a notebook cell: a closure over a local variable, not importable by the ranks.
    secret = 41

    def cell_fn(ctx):
        return secret + ctx.rank

    assert run(cell_fn, 2, quiet=True) == [41, 42]


def test_output_is_streamed_with_rank_prefix(capsys):
    def chatty(ctx):
        print("hello from", ctx.rank)

    results = run(chatty, 2)
    out = capsys.readouterr().out
    assert "[rank 0] hello from 0" in out and "[rank 1] hello from 1" in out
    assert "[rank 1] hello from 1" in results.log


@pytest.mark.parametrize(
    "bad, error",
    [(0, ValueError), (-2, ValueError), ("4", TypeError), (2.0, TypeError), (True, TypeError)],
)
def test_bad_world_size_is_named(bad, error):
    with pytest.raises(error, match="world_size"):
        run(sum_of_ranks, bad, 1.0)


def test_unpicklable_function_gets_a_clear_message():
    lock = threading.Lock()

    def uses_lock(ctx):
        with lock:
            return ctx.rank

    with pytest.raises(TypeError, match="could not send 'uses_lock'.*cannot be"):
        run(uses_lock, 2)


def test_not_callable_and_bad_backend():
    with pytest.raises(TypeError, match="fn must be a function"):
        run(42, 2)
    with pytest.raises(ValueError, match="backend must be"):
        run(sum_of_ranks, 2, 1.0, backend="mpi")
    gpus = torch.cuda.device_count()
    with pytest.raises(
        ValueError, match=f"'nccl' needs one GPU per rank on a node: {gpus + 1} ranks, {gpus} GPU"
    ):
        run(sum_of_ranks, gpus + 1, 1.0, backend="nccl")


def test_the_agent_never_initialises_cuda_before_forking_ranks():
    """Ranks are forked from torchrun's agent; one forked after its parent asked the CUDA driver
    anything cannot use CUDA (seen on an H200: every NCCL run failed). torchrun asks
    torch.cuda.is_available(), so the agent makes torch answer from NVML, which every rank
    inherits."""

    def nvml_check(ctx):
        return os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")

    assert run(nvml_check, 2, quiet=True) == ["1", "1"]
    assert run(nvml_check, 2, quiet=True, cold=True) == ["1", "1"]


def raise_on_rank_2(ctx):
    if ctx.rank == 2:
        raise ValueError("bad value on purpose")
    t = torch.ones(1)
    dist.all_reduce(t, group=ctx.group)  # the others wait here for rank 2
    return ctx.rank


def test_a_raising_rank_is_named_with_its_traceback_and_all_ranks_go():
    with pytest.raises(RankFailure) as info:
        run(raise_on_rank_2, 4, quiet=True, timeout_s=60)
    elapsed = info.value.elapsed_s  # the ranks' work only (a warm pool may have started first)
    message = str(info.value)
    assert message.startswith("rank 2 raised ValueError: bad value on purpose")
    assert "raise_on_rank_2" in message and "Traceback" in message  # the original traceback
    assert 2 in info.value.tracebacks
    assert not isinstance(info.value, RankTimeout)
    assert elapsed < 30, f"failure took {elapsed:.1f} s to surface"
    assert no_workers_left(within_s=5)  # all ranks gone within 5 s


def stuck_in_recv(ctx):
    if ctx.rank == 0:
        t = torch.zeros(1)
        dist.recv(t, src=1, group=ctx.group)  # rank 1 never sends
    return ctx.rank


def test_a_stuck_rank_ends_at_the_timeout_and_is_named():
    with pytest.raises(RankTimeout) as info:
        run(stuck_in_recv, 2, quiet=True, timeout_s=20)
    elapsed = info.value.elapsed_s
    assert info.value.unfinished == [0]
    assert str(info.value).startswith("rank 0 did not finish")
    assert "Finished: rank 1" in str(info.value)
    assert "rank 1 returned while rank 0 was still inside recv" in str(info.value)
    assert elapsed < 20 + 6
    assert no_workers_left()


def test_deadline_kills_a_rank_that_never_reaches_a_collective():
    def sleeper(ctx):
        if ctx.rank == 1:
            time.sleep(60)
        return ctx.rank

    with pytest.raises(RankTimeout, match="deadline of 10 s") as info:
        run(sleeper, 2, quiet=True, timeout_s=10, pg_timeout_s=30)
    assert info.value.unfinished == [1]
    assert "in sleeper" in str(info.value), "the message shows where the rank was waiting"
    assert info.value.elapsed_s < 10 + 6
    assert no_workers_left()


def test_two_runs_at_once_do_not_collide():
    results = {}

    def launch(key, scale):
        results[key] = run(sum_of_ranks, 2, scale, quiet=True)

    threads = [threading.Thread(target=launch, args=(k, s)) for k, s in (("a", 1.0), ("b", 10.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [r["sum"] for r in results["a"]] == [1.0, 1.0]
    assert [r["sum"] for r in results["b"]] == [10.0, 10.0]


# `make soak` runs 20 launches (LAB_LAUNCH_RUNS); the suite runs 6 (each cold launch of 2-4
# gloo ranks costs 5-20 s on a loaded 2-core CI machine).
LAUNCH_RUNS = int(os.environ.get("LAB_LAUNCH_RUNS", "6"))


@pytest.mark.slow
def test_cold_launches_all_exit_cleanly(monkeypatch):
    """gloo ranks can abort after destroy_process_group; the worker's barrier + gc.collect()
    teardown must make every exit clean (each rank reports after teardown, then leaves).

    The claim is "no rank aborts", not "teardown is fast": the launcher stops waiting for a
    clean-up after 5 s (the learner's results are complete by then), which on a loaded 2-core
    machine a clean 4-rank teardown can exceed (seen once with load ~12). Here it waits up to
    60 s, so an unclean exit means a rank died before writing its .done mark."""
    monkeypatch.setattr("lab_utils.runtime.engine.jobs.TEARDOWN_GRACE_S", 60.0)
    unclean = []
    for i in range(LAUNCH_RUNS):
        results = run(sum_of_ranks, 2 + 2 * (i % 2), 1.0, quiet=True, cold=True)
        if not results.clean_exit:
            unclean.append(i)
    assert unclean == []
    assert no_workers_left()


def test_oversubscription_note():
    cores = os.cpu_count()
    assert oversubscription_note(cores + 1, "gloo").startswith(f"note: {cores + 1} ranks share")
    assert oversubscription_note(1, "gloo") is None
    assert (
        oversubscription_note(cores + 1, "nccl") is None
    )  # GPU ranks do not share CPU cores for compute


def test_preload_reaches_every_rank_without_importing_there():
    def has_wave(ctx):
        return "wave" in sys.modules  # a stdlib module nothing else in the path imports

    assert run(has_wave, 2, quiet=True) == [False, False]
    assert run(has_wave, 2, quiet=True, preload=("wave",)) == [True, True]
    with pytest.raises(ValueError, match="preload: no module named 'no_such_mod'"):
        run(has_wave, 2, preload=("no_such_mod",))


def exits_silently_on_rank_1(ctx):
    if ctx.rank == 1:
        print("about to vanish", flush=True)
        os._exit(3)  # no traceback, like a segfault or the OOM killer
    t = torch.ones(1)
    dist.all_reduce(t, group=ctx.group)
    return ctx.rank


def test_a_dead_rank_is_named_when_the_output_ends_before_the_agent_is_seen_to_exit(tmp_path):
    """End-of-file on the agent's output can come a moment before its pidfd says it exited: the
    kernel closes a process's files before it announces its exit. Seen once under load (a clean
    suite run): the launcher took end-of-file as the end, never looked for dead ranks, and the
    rank below went unnamed ("ranks 0, 1, 2 exited without reporting a result")."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # rank 1: a process that has exited, with no report (os._exit)
    for rank, pid in enumerate([os.getpid(), gone.pid, os.getpid()]):
        (tmp_path / f"forked{rank}").write_text(str(pid))
    for rank in (0, 2):
        (tmp_path / f"rank{rank}.term").write_text("")  # stopped by torchrun after rank 1 died
    lines: queue.Queue = queue.Queue()
    lines.put(None)  # the agent's output has ended...
    agent = types.SimpleNamespace(
        lines=lines, running=lambda: True
    )  # ...its exit is not yet announced
    out = wait_for_ranks(agent, str(tmp_path), 3, 30.0, True, time.perf_counter())
    assert out.dead == [1]


def test_a_rank_that_dies_silently_is_named_not_its_victims():
    with pytest.raises(RankFailure) as info:
        run(exits_silently_on_rank_1, 3, quiet=True, timeout_s=60)
    assert info.value.dead == [1], str(info.value)
    assert str(info.value).startswith("rank 1 died without reporting an error")
    assert "about to vanish" in str(info.value)
    assert 1 not in info.value.tracebacks
    assert not any("SignalException" in tb for tb in info.value.tracebacks.values())
    assert no_workers_left()


def _asserts_on_rank1(ctx):
    value = 42 if ctx.rank == 1 else 0
    assert value == 0, f"rank {ctx.rank} holds {value}, expected 0"
    return value


def test_on_ranks_reraises_a_rank_assertion_with_its_message(on_ranks):
    assert list(on_ranks(lambda ctx: ctx.rank, 2, timeout_s=60)) == [0, 1]
    with pytest.raises(AssertionError, match=r"on rank 1: rank 1 holds 42, expected 0") as info:
        on_ranks(_asserts_on_rank1, 2, timeout_s=60)
    assert "_asserts_on_rank1" in str(info.value)  # the rank's own traceback comes along


def one_step_fewer_on_rank_1(ctx):
    """Rank 1 runs one step fewer and goes on to the next collective (a 1-element count) while
    rank 0 is still in its step's all-reduce: gloo aborts rank 1 when rank 0's 64 floats arrive."""
    grad = torch.ones(64)
    for _ in range(3 - (ctx.rank == 1)):
        dist.all_reduce(grad, group=ctx.group)  # the step's gradient all-reduce
    dist.all_reduce(torch.ones(1), group=ctx.group)  # the next collective: the count
    return ctx.rank


def test_ranks_in_different_collectives_are_a_hang_not_a_death():
    """gloo ends this deadlock itself, aborting the rank whose buffer the data did not fit: no
    traceback, the process gone. That is a hang with both ranks' lines, not a segfault. (Pooled
    only: a cold run is a one-job pool, the same rank program and collect; checked by hand cold.)"""
    with pytest.raises(RankTimeout) as info:
        run(one_step_fewer_on_rank_1, 2, quiet=True, timeout_s=60)
    message = str(info.value)
    assert message.startswith(
        "ranks 0, 1 did not finish: the ranks were inside DIFFERENT collectives"
    )
    assert "died" not in message and "segfault" not in message.replace("no segfault", "")
    assert "rank 0 was in all_reduce, at one_step_fewer_on_rank_1" in message
    assert "dist.all_reduce(grad, group=ctx.group)" in message
    assert "rank 1 was in all_reduce" in message and "dist.all_reduce(torch.ones(1)" in message
    assert no_workers_left()
