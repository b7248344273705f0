"""Warm ranks: reuse, isolation between runs, and the same failure semantics as a cold launch."""

import os
import random
import threading

import pytest
import torch
import torch.distributed as dist

from lab_utils import RankFailure, RankTimeout, ranks, run
from lab_utils.runtime.engine import pool as pools

COUNTER = 0  # a module global a run might try to change


def pid(ctx):
    return os.getpid()


def draws(ctx):
    return torch.randn(3).tolist(), random.random()


def test_a_second_run_reuses_the_ranks_and_a_new_size_restarts_them():
    first = run(pid, 2, quiet=True)
    again = run(pid, 2, quiet=True)
    assert first.pooled and again.pooled and list(first) == list(again)
    assert len(set(first)) == 2 and os.getpid() not in first
    other = run(pid, 3, quiet=True)
    assert not set(other) & set(first), "another world size gets fresh ranks"
    assert run(pid, 3, quiet=True, cold=True).pooled is False


def test_every_run_starts_from_the_documented_random_state():
    a, b = run(draws, 2, quiet=True), run(draws, 2, quiet=True)
    cold = run(draws, 2, quiet=True, cold=True)
    assert a[0] == a[1] == b[0] == cold[0], "seeded alike on every rank, pooled or cold"


def leaves_a_mess(ctx):
    global COUNTER
    COUNTER += 1  # a notebook function's globals travel by value: a fresh copy every run
    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
    torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o)
    dist.new_group([0, 1])
    return COUNTER


def looks_clean(ctx):
    hooks = torch.nn.modules.module._global_forward_hooks
    groups = len(dist.distributed_c10d._world.pg_map)
    return (
        COUNTER,
        torch.is_grad_enabled(),
        torch.get_default_dtype(),
        len(hooks),
        groups,
        os.getpid(),
    )


def test_what_a_run_changes_does_not_leak_into_the_next():
    leaves_a_mess.__module__ = "__main__"  # travel by value, as a notebook cell's function does
    looks_clean.__module__ = "__main__"
    before = run(looks_clean, 2, quiet=True)
    assert list(run(leaves_a_mess, 2, quiet=True)) == [1, 1]
    after = run(looks_clean, 2, quiet=True)
    assert after == before  # the same ranks, in the starting state: no leaked global, hook or group
    assert after[0][:4] == (0, True, torch.float32, 0)
    assert list(run(leaves_a_mess, 2, quiet=True)) == [1, 1]


def leaves_a_mode_on(ctx):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    Spy().__enter__()  # never exited: the ranks cannot be reused
    return os.getpid()


def test_a_state_that_cannot_be_undone_gets_fresh_ranks_next_time():
    dirty = run(leaves_a_mode_on, 2, quiet=True)
    assert not set(run(pid, 2, quiet=True)) & set(dirty)


def raises_on_rank_1(ctx):
    if ctx.rank == 1:
        raise ValueError("bad value on purpose")
    dist.barrier()


def stuck(ctx):
    if ctx.rank == 0:
        dist.recv(torch.zeros(1), src=1)


def test_failures_are_reported_as_cold_ones_and_the_next_run_gets_fresh_ranks():
    warm = run(pid, 2, quiet=True)
    with pytest.raises(
        RankFailure, match=r"^rank 1 raised ValueError: bad value on purpose"
    ) as info:
        run(raises_on_rank_1, 2, quiet=True, timeout_s=60)
    assert "raises_on_rank_1" in info.value.tracebacks[1]
    fresh = run(pid, 2, quiet=True)
    assert not set(fresh) & set(warm)
    with pytest.raises(RankTimeout, match=r"^rank 0 did not finish") as info:
        run(stuck, 2, quiet=True, timeout_s=8)
    assert "rank 0 was waiting in stuck" in str(info.value) and "Finished: rank 1" in str(
        info.value
    )
    assert not set(run(pid, 2, quiet=True)) & set(fresh)


def test_a_crash_every_fifth_run_is_reported_and_the_others_are_right():
    def maybe_crash(ctx, i):
        if i % 5 == 4 and ctx.rank == i % 2:
            raise RuntimeError(f"crash {i}")
        t = torch.tensor([float(i + ctx.rank)])
        dist.all_reduce(t)
        return t.item()

    crashes = []
    for i in range(15):
        try:
            assert list(run(maybe_crash, 2, i, quiet=True, timeout_s=60)) == [2 * i + 1] * 2
        except RankFailure as exc:
            assert str(exc).startswith(f"rank {i % 2} raised RuntimeError: crash {i}")
            crashes.append(i)
    assert crashes == [4, 9, 14]


def test_two_threads_at_once_both_get_their_results():
    results = {}

    def launch(key, scale):
        results[key] = run(lambda ctx, s: s * (ctx.rank + 1), 2, scale, quiet=True)

    threads = [threading.Thread(target=launch, args=(k, s)) for k, s in (("a", 1), ("b", 10))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert list(results["a"]) == [1, 2] and list(results["b"]) == [10, 20]
    assert {results["a"].pooled, results["b"].pooled} <= {True, False}


def test_explicit_pool_control():
    pool = ranks(2)
    assert pools.current() is pool and pool.world_size == 2
    assert run(pid, 2, quiet=True).pooled and pools.current() is pool  # run() uses it
    pool.shutdown()
    assert pools.current() is None
    assert run(pid, 2, quiet=True).pooled  # a new pool starts on demand


def test_a_changed_distributed_environment_restarts_the_pool(monkeypatch):
    first = run(pid, 2, quiet=True)
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "INFO")  # read when a process group is made
    second = run(lambda ctx: (os.getpid(), os.environ["TORCH_DISTRIBUTED_DEBUG"]), 2, quiet=True)
    assert not {p for p, _ in second} & set(first) and {v for _, v in second} == {"INFO"}


def test_after_a_failure_a_spare_starts_at_once_and_the_next_matching_run_adopts_it(monkeypatch):
    monkeypatch.setenv("LAB_UTILS_SPARE", "1")  # the default outside a Jupyter kernel is no spare
    run(pid, 2, quiet=True)
    with pytest.raises(RankFailure):
        run(raises_on_rank_1, 2, quiet=True, timeout_s=60)
    spare = pools._SPARE
    assert spare is not None and spare.agent.running() and pools.current() is None
    fresh = run(pid, 2, quiet=True)
    assert pools.current() is spare and pools._SPARE is None
    assert sorted(fresh) == sorted(spare.pids.values())
    with pytest.raises(RankFailure):
        run(raises_on_rank_1, 2, quiet=True, timeout_s=60)
    spare = pools._SPARE
    assert run(pid, 3, quiet=True).pooled  # another size: the spare does not fit and is killed
    assert pools._SPARE is None and not spare.agent.running()
    pools.shutdown()


def test_a_pool_started_without_waiting_serves_its_first_run():
    # a NEW pool: ranks() hands back a healthy pool of this size that an earlier test in this worker
    # left running (which one ran before depends on how xdist shared the tests out: a soak found it)
    pools.shutdown()
    pool = ranks(2, wait=False)
    assert pools.current() is pool and pool._listener is not None  # still coming up
    assert list(run(lambda ctx: ctx.rank, 2, quiet=True)) == [0, 1]
    assert pool._listener is None and pools.current() is pool
    pool.shutdown()
    assert not pool.agent.running()


def test_no_spare_outside_a_notebook_unless_asked(monkeypatch):
    monkeypatch.delenv("LAB_UTILS_SPARE", raising=False)
    assert pools._spare_wanted() == ("ipykernel" in __import__("sys").modules)
    monkeypatch.setenv("LAB_UTILS_SPARE", "0")
    assert not pools._spare_wanted()
    with pytest.raises(RankFailure):
        run(raises_on_rank_1, 2, quiet=True, timeout_s=60)
    assert pools._SPARE is None
