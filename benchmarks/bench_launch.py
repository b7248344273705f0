"""Launch speed and the warm pool (issues 2 and 14), side by side in one run.

    .venv/bin/python benchmarks/bench_launch.py [--repeats 9] [--nproc 4] [--skip-cell]

Timings (median of --repeats, interleaved so drifting machine load hits all alike):
  bare-empty   `torchrun --standalone --nproc-per-node N empty.py`: the literal floor
  bare-init    torchrun of a minimal distributed program (init_process_group, barrier, destroy)
  cold         lab_utils.run(trivial, N, cold=True): a fresh torchrun launch per call, its agent
               forked from the zygote (torch already imported)
  cold-exec    the same with LAB_UTILS_ZYGOTE=0: the agent is a new Python that imports torch
  warm         lab_utils.run(trivial, N): the same call on the warm pool
  %%ranks      a notebook cell `%%ranks` with one all-reduce, in a real Jupyter kernel, from
               execute_request to the last rank's output line (nbclient)
Then 100 pooled runs in a row with a crash every 10th: crashes reported, results right, orphans.
Then the CPU seconds of one cold launch with the pool's preload (torch._dynamo), zygote vs new
Python: what the kernel counted for the agent and its ranks (/proc and getrusage).
Targets: warm <= 0.3 s and >= 8x faster than cold; %%ranks <= 0.3 s; 0 orphans, 10/10 crashes
named, 90/90 results right; cold / bare-empty <= 1.15.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from lab_utils import RankFailure, run  # noqa: E402
from lab_utils.runtime.engine import pool as pools  # noqa: E402
from lab_utils.runtime.engine import zygote  # noqa: E402
from lab_utils.runtime.launch import oversubscription_note  # noqa: E402

MINIMAL = """
import datetime, gc, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
dist.barrier(); gc.collect(); dist.destroy_process_group()
"""


def trivial(ctx):
    return ctx.rank


def crash_every_10th(ctx, i):
    if i % 10 == 9 and ctx.rank == i % ctx.world_size:
        raise RuntimeError(f"crash {i}")
    t = torch.tensor([float(i)])
    dist.all_reduce(t)
    return t.item()


def time_cmd(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    return time.perf_counter() - start


def timed_run(**kw) -> float:
    start = time.perf_counter()
    run(trivial, kw.pop("nproc"), quiet=True, **kw)
    return time.perf_counter() - start


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a process and of the children it has reaped (/proc/PID/stat, fields 14-17)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def zygote_switch(on: bool):
    """Agents forked from the zygote (on) or started as new Pythons (off), for the block."""
    os.environ[zygote.SWITCH] = "1" if on else "0"
    try:
        yield
    finally:
        del os.environ[zygote.SWITCH]


def launch_cpu(nproc: int, forked: bool) -> float:
    """CPU of one cold launch (agent + ranks) with the pool's preload, as the kernel counted it."""
    with zygote_switch(forked):
        if forked:
            run(
                trivial, nproc, cold=True, quiet=True, preload=pools.POOL_PRELOAD
            )  # the zygote is up
            before = _tree_cpu(zygote._ZYGOTE.proc.pid)
        else:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
        run(trivial, nproc, cold=True, quiet=True, preload=pools.POOL_PRELOAD)
        if forked:
            time.sleep(1.5)  # the zygote reaps its exited agents within a second
            return _tree_cpu(zygote._ZYGOTE.proc.pid) - before
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def cell_latency(nproc: int, repeats: int) -> list[float]:
    """%%ranks with one all-reduce in a real kernel: execute_request -> last rank's output."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(
        kernel_name="python3", env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    )
    try:

        def execute(code: str) -> tuple[float, str]:
            start = time.perf_counter()
            msg_id = kc.execute(code)
            out, last = "", start
            while True:
                msg = kc.get_iopub_msg(timeout=300)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream":
                    out += msg["content"]["text"]
                    last = time.perf_counter()
                elif msg["msg_type"] == "error":
                    raise RuntimeError("\n".join(msg["content"]["traceback"]))
                elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    return last - start, out

        execute("%load_ext lab_utils")
        cell = (
            f"%%ranks -n {nproc}\nx = torch.ones(1) * ctx.rank\ndist.all_reduce(x)\nprint(x.item())"
        )
        execute(cell)  # starts the pool
        samples = []
        for _ in range(repeats):
            elapsed, out = execute(cell)
            assert out.count(f"{float(sum(range(nproc)))}") == nproc, out
            samples.append(elapsed)
        return samples
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def worker_processes() -> int:
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    pool = pools.current()
    mine = set() if pool is None else {pool.agent.proc.pid, *pool.pids.values()}
    return sum(
        1
        for line in out.splitlines()
        if "lab_utils/runtime/worker.py" in line
        and int(line.split()[0]) not in mine
        and os.getppid() != int(line.split()[0])
    )


def crash_loop(nproc: int, n: int = 100) -> None:
    before = worker_processes()
    right = crashes = wrong = 0
    for i in range(n):
        try:
            res = run(crash_every_10th, nproc, i, quiet=True, timeout_s=60)
            right += list(res) == [float(i) * nproc] * nproc
            wrong += list(res) != [float(i) * nproc] * nproc
        except RankFailure as exc:
            crashes += str(exc).startswith(f"rank {i % nproc} raised RuntimeError: crash {i}")
    pools.shutdown()
    time.sleep(1.0)
    orphans = worker_processes() - before
    print(
        f"{n} pooled runs, a crash every 10th: {crashes}/{n // 10} crashes named, "
        f"{right}/{n - n // 10} results right, {wrong} wrong, {max(orphans, 0)} orphans"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--skip-cell", action="store_true", help="no Jupyter kernel measurement")
    ns = parser.parse_args()
    tmp = tempfile.mkdtemp()
    empty, minimal = os.path.join(tmp, "empty.py"), os.path.join(tmp, "minimal.py")
    open(empty, "w").close()
    with open(minimal, "w") as f:
        f.write(MINIMAL)
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={ns.nproc}",
    ]

    run(trivial, ns.nproc, quiet=True)  # starts the pool (and imports torch here)
    samples: dict[str, list[float]] = {
        "bare-empty": [],
        "bare-init": [],
        "cold": [],
        "cold-exec": [],
        "warm": [],
    }
    for _ in range(ns.repeats):
        samples["bare-empty"].append(time_cmd(torchrun + [empty]))
        samples["bare-init"].append(time_cmd(torchrun + [minimal]))
        samples["cold"].append(timed_run(nproc=ns.nproc, cold=True))
        with zygote_switch(False):
            samples["cold-exec"].append(timed_run(nproc=ns.nproc, cold=True))
        samples["warm"].append(timed_run(nproc=ns.nproc))
    if not ns.skip_cell:
        samples["%%ranks"] = cell_latency(ns.nproc, ns.repeats)
    med = {k: statistics.median(v) for k, v in samples.items()}
    load = os.getloadavg()[0]
    print(
        f"{ns.nproc} ranks, median of {ns.repeats}, load average {load:.1f} on {os.cpu_count()} "
        f"cores"
    )
    for name, value in med.items():
        print(
            f"  {name:11} {value:7.3f} s   (runs: {', '.join(f'{x:.3f}' for x in samples[name])})"
        )
    print(
        f"warm dispatch {med['warm']:.3f} s (target <= 0.3), cold / warm = "
        f"{med['cold'] / med['warm']:.0f}x "
        f"(target >= 8x)"
    )
    if "%%ranks" in med:
        print(f"%%ranks cell with one all-reduce: {med['%%ranks']:.3f} s (target <= 0.3)")
    print(
        f"cold / bare-empty = {med['cold'] / med['bare-empty']:.2f} (target <= 1.15), "
        f"cold / bare-init = {med['cold'] / med['bare-init']:.2f}"
    )
    cpu = {
        name: statistics.median(launch_cpu(ns.nproc, forked) for _ in range(ns.repeats))
        for name, forked in (("zygote", True), ("new Python", False))
    }
    print(
        f"CPU of one cold launch with torch._dynamo preloaded (agent + {ns.nproc} ranks, median): "
        f"zygote {cpu['zygote']:.2f} s, new Python {cpu['new Python']:.2f} s"
    )
    note = oversubscription_note(ns.nproc, "gloo")
    if note:
        print(note)
    crash_loop(ns.nproc)


if __name__ == "__main__":
    main()
