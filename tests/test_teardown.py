"""Our from-scratch modules exit cleanly OUTSIDE our launcher (issue 12.3).

The harness many users and other courses write: ``torch.multiprocessing`` with the spawn start
method, 2 gloo ranks, a toy model with tied weights, 5 SGD steps, then ``destroy_process_group()``
with no barrier and no ``gc.collect()``; the process then leaves through a normal interpreter
shutdown. A rank that exits non-zero, dies by a signal (SIGABRT: "terminate called without an
active exception") or is still alive 60 s after its peer has exited is a bad exit. The cause, found
with a core dump (docs/teardown.md): a collective launched from a backward hook carried torch's
per-backward Python object, and gloo's worker thread released it while the interpreter was
finalising. lab_utils/parallel/backward_tls.py keeps it out; the last test here checks that.
"""

from __future__ import annotations

import os
import socket
import sys
from multiprocessing import connection as mp_connection

import pytest
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
# 30 runs as the issue asks cost 5-10 minutes of 2 busy cores (every spawned rank imports torch):
# `make soak` and `LAB_TEARDOWN_RUNS=30 pytest tests/test_teardown.py` run them. The suite runs 2
# (6 took 92 s of a 10-minute budget): the regression guard is the deterministic spy test below,
# which fails without the fix every time; these runs only smoke-test the harness.
RUNS = int(os.environ.get("LAB_TEARDOWN_RUNS", "2"))
START_TIMEOUT_S = 600.0  # a run's first rank to exit, on a very busy machine
EXIT_GAP_S = 60.0  # how long the other rank may take to follow it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _harness_rank(rank: int, world: int, port: int, kind: str, log: str) -> None:
    # this rank's stderr (and faulthandler's stacks, should it die by a signal) to `log`
    import faulthandler

    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable()
    import torch
    import torch.distributed as dist
    from torch import nn

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    emb, mid, out = nn.Embedding(16, 8), nn.Linear(8, 8), nn.Linear(8, 16, bias=False)
    out.weight = emb.weight  # tied
    model = nn.Sequential(emb, mid, nn.ReLU(), out)
    if kind == "bucket":
        from lab_utils.parallel.data_parallel import BucketDDP

        wrapped = BucketDDP(model, bucket_cap_bytes=100)
    else:
        from lab_utils.parallel.data_parallel import NaiveDDP

        wrapped = NaiveDDP(model)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    for step in range(5):
        x = torch.randint(0, 16, (4, 3), generator=torch.Generator().manual_seed(10 * rank + step))
        wrapped(x).sum().backward()
        wrapped.finish_gradient_synchronization()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()  # no barrier, no gc.collect(): as such harnesses do


def bad_exits(kind: str, runs: int, logs: str) -> list[tuple[list[int | None], str]]:
    """Exit codes of every run that had a bad exit (None: hung at exit, then killed), with the
    end of each rank's stderr (in ``logs``; faulthandler prints the Python stacks of a rank that
    dies by a signal).

    The two ranks finish their last collective together, so they leave within moments of each
    other; a rank still alive EXIT_GAP_S after its peer has exited is stuck at exit. (No bound
    on the run itself: on a busy machine spawning and importing torch alone can take a minute.)
    """
    bad = []
    ctx = mp.get_context("spawn")
    for _ in range(runs):
        port = _free_port()
        paths = [os.path.join(logs, f"rank{r}.err") for r in range(2)]
        procs = [
            ctx.Process(target=_harness_rank, args=(r, 2, port, kind, paths[r])) for r in range(2)
        ]
        for p in procs:
            p.start()
        sentinels = {p.sentinel: p for p in procs}
        first_done = mp_connection.wait(list(sentinels), timeout=START_TIMEOUT_S)
        for p in procs:
            p.join(EXIT_GAP_S if first_done else 0)
        codes = [p.exitcode for p in procs]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        if codes != [0, 0]:
            bad.append(
                (
                    codes,
                    "\n".join(
                        f"--- rank {r} stderr (exit {codes[r]}):\n{_tail(paths[r])}"
                        for r in range(2)
                    ),
                )
            )
    return bad


def _tail(path: str, lines: int = 40) -> str:
    try:
        with open(path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-lines:]) or "(empty)"
    except OSError as e:
        return f"(unreadable: {e})"


@pytest.mark.timeout(60 * RUNS + 300)
@pytest.mark.parametrize("kind", ["bucket"])
def test_spawn_harness_exits_cleanly(kind, monkeypatch, tmp_path):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([os.path.dirname(HERE), *sys.path]))
    bad = bad_exits(kind, RUNS, str(tmp_path))
    assert not bad, (
        f"{len(bad)} of {RUNS} runs had a bad exit (exit codes per rank): {[c for c, _ in bad]}\n"
        + "\n".join(err for _, err in bad)
    )


COLLECTIVES = ("all_reduce", "reduce_scatter_single", "all_gather_single", "broadcast")


def _backward_collectives_carry_no_python_object(ctx) -> None:
    """On each rank. The cause of the aborts (docs/teardown.md): a collective launched from a
    backward hook copies torch's per-backward Python object into its work, and gloo's worker
    thread may release it after the interpreter began finalising. First the control: a plain
    hook's work does hold it (else this test checks nothing). Then our three classes: no
    collective they launch during backward sees that object in the thread-local state."""
    import torch
    import torch.distributed as dist
    from torch import nn

    from lab_utils.parallel.backward_tls import KEY
    from lab_utils.parallel.data_parallel import BucketDDP
    from lab_utils.parallel.fsdp import FSDP
    from lab_utils.parallel.zero import ZeroOptimizer

    lin, seen = nn.Linear(4, 4), {}

    def plain_hook(p):
        seen["object"] = torch._C._get_obj_in_tls(KEY)
        seen["work"] = dist.all_reduce(p.grad, async_op=True)

    lin.weight.register_post_accumulate_grad_hook(plain_hook)
    lin(torch.ones(2, 4)).sum().backward()
    seen["work"].wait()
    held = sys.getrefcount(seen["object"]) - 2  # beyond `seen` and getrefcount's argument
    assert held == 1, (
        f"control: a work launched in backward should hold torch's object, {held} refs"
    )

    carried, originals = [], {name: getattr(dist, name) for name in COLLECTIVES}

    def spy(name):
        def collective(*args, **kwargs):
            if torch._C._is_key_in_tls(KEY):
                carried.append(name)
            return originals[name](*args, **kwargs)

        return collective

    def model():
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)
        )

    def bucket_ddp():
        ddp = BucketDDP(model(), bucket_cap_bytes=100)
        ddp(x).sum().backward()
        ddp.finish_gradient_synchronization()

    def zero2():
        m = model()
        zero = ZeroOptimizer(m, stage=2)
        m(x).sum().backward()
        zero.step()

    def fsdp():
        FSDP(model(), policy=nn.Linear, prefetch=True)(x).sum().backward()

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(ctx.rank))
    found = {}
    for name in COLLECTIVES:
        setattr(dist, name, spy(name))
    try:
        for label, train_step in (("BucketDDP", bucket_ddp), ("ZeRO-2", zero2), ("FSDP", fsdp)):
            start = len(carried)
            train_step()
            found[label] = carried[start:]
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
    assert not any(found.values()), (
        f"collectives launched with torch's per-backward object in TLS: {found}"
    )


def test_collectives_launched_in_backward_carry_no_python_object(on_ranks):
    on_ranks(_backward_collectives_carry_no_python_object, 2)
