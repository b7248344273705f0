"""Lab 11's jobs under plain torchrun, and what a checkpoint save stalls.

    elastic_train     one attempt of an elastic job (scripts/elastic_train.py under torchrun
                      --max-restarts): resumes from the newest complete DCP checkpoint, injects a
                      crash in attempt 0, logs every event as JSON lines
    read_elastic_log  the incident as numbers: lost work, restart, reload, the loss curve
    torchrun_job      run a script under torchrun from a notebook (its own process group, a
                      deadline, the agent's log); HungJob: start one that hangs, signal its ranks
    save_stall        the training stall per checkpoint: dcp.save vs dcp.async_save

These drills call torchrun directly (not lab_utils.run): restarts, per-rank log files and
signals are then the ones a cluster job sees.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from lab_utils.data import shard_for_rank
from lab_utils.experiments.lab11.training import (
    RunConfig,
    TrainLog,
    build,
    latest_checkpoint,
    run_data,
    train_loop,
)
from lab_utils.models import GPTConfig
from lab_utils.reference import default_loss

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPTS = os.path.join(REPO, "scripts")


def elastic_train(
    ctx, cfg: RunConfig, root: str, log_dir: str, crash=None, started_at: float | None = None
) -> TrainLog:
    """One attempt of an elastic job (run by torchrun, see scripts/elastic_train.py).

    torchrun numbers the attempts (TORCHELASTIC_RESTART_COUNT); each resumes from the newest
    complete
    checkpoint under `root` if any. The crash is injected in attempt 0 only. Every event goes to
    <log_dir>/attempt<a>_rank<r>.jsonl AS IT HAPPENS (a crashing process cannot write afterwards);
    `started_at`: when the process started, before `import torch` (a restart pays the imports).
    """
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(log_dir, f"attempt{attempt}_rank{ctx.rank}.jsonl")

    def record(event: dict) -> None:
        with open(path, "a") as f:
            f.write(json.dumps(dict(event, attempt=attempt)) + "\n")

    now = time.time()
    record({"kind": "startup", "start": started_at or now, "end": now, "rank": ctx.rank})
    last = latest_checkpoint(root)
    log = train_loop(
        ctx, cfg, root, resume_from=last, crash=crash if attempt == 0 else None, record=record
    )[0]
    record(
        {
            "kind": "done",
            "start": time.time(),
            "end": time.time(),
            "rank": ctx.rank,
            "resumed_from": os.path.basename(last) if last else None,
            "losses": log.losses,
        }
    )
    return log


@dataclass(frozen=True)
class ElasticReport:
    """What the elastic drill's logs say (read_elastic_log): the incident as numbers."""

    attempts: int
    crash_rank: int
    crash_step: int
    resumed_from: str  # the checkpoint attempt 1 loaded
    losses: dict[int, float]  # every step's global loss: attempt 0 up to the crash, then the rest
    lost_steps: int  # steps computed after the last checkpoint, computed again
    lost_work_s: float  # from the end of the last checkpoint to the crash
    restart_s: float  # crash -> every new process started (detection, teardown, launch)
    init_s: float  # new process start -> process group up (imports, rendezvous)
    reload_s: float  # dcp.load of the checkpoint (slowest rank)
    events: list[dict]  # every rank's events, both attempts, times relative to the start


def read_elastic_log(log_dir: str) -> ElasticReport:
    """Merge the JSON lines every rank of every attempt wrote into one incident report."""
    events = []
    for name in sorted(os.listdir(log_dir)):
        if name.endswith(".jsonl"):
            with open(os.path.join(log_dir, name)) as f:
                events += [json.loads(line) for line in f if line.strip()]
    t0 = min(e["start"] for e in events)
    for e in events:
        e["start"], e["end"] = e["start"] - t0, e["end"] - t0
    crash = next(e for e in events if e["kind"] == "crash")
    first = [e for e in events if e["attempt"] == 0]
    again = [e for e in events if e["attempt"] == max(e["attempt"] for e in events)]
    saves = [e for e in first if e["kind"] == "save" and e["end"] <= crash["start"]]
    loads = [e for e in again if e["kind"] == "load"]
    resumed = loads[0]["step"]
    done = next(e for e in again if e["kind"] == "done")
    losses = {int(k): v for k, v in done["losses"].items()}
    losses = {
        e["step"]: e["loss"]
        for e in first
        if e["kind"] == "step" and e["rank"] == 0 and e["step"] < resumed
    } | losses
    starts = [e for e in again if e["kind"] == "startup"]
    return ElasticReport(
        attempts=1 + max(e["attempt"] for e in events),
        crash_rank=crash["rank"],
        crash_step=crash["step"],
        resumed_from=done["resumed_from"],
        losses=losses,
        lost_steps=crash["step"] - resumed,
        lost_work_s=crash["start"] - max(e["end"] for e in saves),
        restart_s=max(e["start"] for e in starts) - crash["start"],
        init_s=max(e["end"] - e["start"] for e in starts),
        reload_s=max(e["end"] - e["start"] for e in loads),
        events=events,
    )


# ----------------------------------------------------------------------------- torchrun jobs
@dataclass(frozen=True)
class JobResult:  # what torchrun_job returns
    returncode: int
    elapsed_s: float
    agent_log: list[str]  # torchrun's own lines (restarts, failures), not the ranks'
    log_dir: str  # per-rank stdout/stderr: <log_dir>/<run>/attempt_<a>/<r>/


def torchrun_command(
    script: str, nproc: int, log_dir: str, max_restarts: int = 0, args: tuple[str, ...] = ()
) -> list[str]:
    """torchrun with a local rendezvous, per-rank log files (-r 3: stdout and stderr of every
    rank to <log_dir>) and forked workers (--run-path --start-method fork). It starts through
    lab_utils.runtime.engine.agent: torchrun itself, after importing PRELOAD once, so the
    forked ranks inherit torch, FSDP and DCP instead of importing them again (a real restart pays
    that)."""
    return [
        sys.executable,
        "-m",
        "lab_utils.runtime.engine.agent",
        "--standalone",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "--monitor-interval=0.1",
        f"--log-dir={log_dir}",
        "--redirects=3",
        "--run-path",
        "--start-method=fork",
        os.path.join(SCRIPTS, script),
        *args,
    ]


PRELOAD = (
    "torch._dynamo",
    "torch.distributed.fsdp",
    "torch.distributed.checkpoint",
    "lab_utils.experiments.lab11.elastic",
)


def _env(extra: dict | None) -> dict:
    path = os.pathsep.join(
        dict.fromkeys([REPO, *os.environ.get("PYTHONPATH", "").split(os.pathsep)])
    )
    env = dict(
        os.environ,
        PYTHONPATH=path.rstrip(os.pathsep),
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
        PYTHONUNBUFFERED="1",
        LAB_UTILS_PRELOAD=",".join(PRELOAD),
        # a fresh TCPStore per restart: with the store shared between torchrun's
        # rendezvous and init_process_group (the default), a restarted group can read
        # the dead group's addresses (pytorch/pytorch#135712)
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
    )
    env.update(extra or {})
    return env


def torchrun_job(
    script: str,
    nproc: int,
    log_dir: str,
    max_restarts: int = 0,
    args: tuple[str, ...] = (),
    timeout_s: float = 120.0,
    env: dict | None = None,
) -> JobResult:
    """Run scripts/<script> under torchrun and wait; returns the exit code and the agent's log."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        torchrun_command(script, nproc, log_dir, max_restarts, args),
        env=_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return JobResult(proc.returncode, time.perf_counter() - t0, out.splitlines(), log_dir)


def rank_log(log_dir: str, rank: int, attempt: int = 0, stream: str = "stderr") -> str:
    """The text one rank wrote to stdout/stderr in one attempt (torchrun -r 3 files)."""
    for run in sorted(os.listdir(log_dir)):
        path = os.path.join(log_dir, run, f"attempt_{attempt}", str(rank), f"{stream}.log")
        if os.path.exists(path):
            with open(path) as f:
                return f.read()
    return ""


class HungJob:
    """scripts/hung_job.py under torchrun, left hanging to be looked at from outside:
    wait_until_stuck(), pids(), signal_all(SIGUSR1) (stacks via faulthandler), stop()."""

    def __init__(self, nproc: int, out_dir: str, env: dict | None = None) -> None:
        self.nproc, self.out_dir = nproc, out_dir
        self.log_dir = os.path.join(out_dir, "logs")
        self.proc = subprocess.Popen(
            torchrun_command("hung_job.py", nproc, self.log_dir, args=("--out", out_dir)),
            env=_env(env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def wait_until_stuck(self, timeout_s: float = 60.0, settle_s: float = 0.5) -> None:
        marks = [os.path.join(self.out_dir, f"stuck_rank{r}") for r in range(self.nproc)]
        deadline = time.monotonic() + timeout_s
        while not all(os.path.exists(m) for m in marks):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"the hung job did not reach its hang (exit {self.proc.returncode})"
                )
            time.sleep(0.05)
        time.sleep(settle_s)  # the ranks are now inside the collective and the barrier

    def pids(self) -> dict[int, int]:
        out = {}
        for r in range(self.nproc):
            with open(os.path.join(self.out_dir, f"pid_rank{r}")) as f:
                out[r] = int(f.read())
        return out

    def signal_all(self, signum: int = signal.SIGUSR1, settle_s: float = 0.3) -> None:
        for pid in self.pids().values():
            os.kill(pid, signum)
        time.sleep(settle_s)  # faulthandler writes from the signal handler: at once, not instantly

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


# ----------------------------------------------------------------------------- save cost
STALL_MODEL = GPTConfig(vocab_size=512, seq_len=32, n_layer=2, n_head=4, d_model=256)


@dataclass(frozen=True)
class SaveStall:
    """Per checkpoint: how long the training loop was blocked, and when the file was complete."""

    mode: str  # "none", "sync" (dcp.save) or "async" (dcp.async_save)
    step_s: float  # a training step without a checkpoint (median)
    stall_s: list[float]  # time inside the save call, per checkpoint (this rank)
    complete_s: list[float]  # save call -> checkpoint complete on storage, per checkpoint
    bytes_per_rank: int  # tensor bytes this rank wrote per checkpoint


def save_stall(
    ctx, root: str, steps: int = 6, every: int = 2, modes=("sync", "async")
) -> list[SaveStall]:
    """Train STALL_MODEL (FSDP2, AdamW) with a checkpoint every `every` steps, once per mode.

    sync:  dcp.save blocks until every rank's file (and rank 0's .metadata) is written.
    async: dcp.async_save copies the state to CPU memory (staging: the only blocking part), then
           writes it in a background thread; the next save (or the end) waits for it first.
           Its collectives run on a separate gloo group, so they never interleave with the
           training's collectives on the default group (torchtitan does the same).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    cfg = RunConfig(model=STALL_MODEL, global_batch=4 * ctx.world_size, n_samples=64)
    ckpt_group = dist.new_group(backend="gloo")
    out = []
    for mode in modes:
        model, opt, _ = build(cfg)
        x, y = shard_for_rank(run_data(cfg)[:2], ctx.rank, ctx.world_size)
        steps_s, stall, complete, pending, nbytes = [], [], [], None, 0
        for step in range(steps):
            dist.barrier(group=ctx.group)
            t0 = time.perf_counter()
            opt.zero_grad()
            default_loss(
                model(x[: cfg.global_batch // ctx.world_size]),
                y[: cfg.global_batch // ctx.world_size],
            ).backward()
            opt.step()
            t1 = time.perf_counter()
            if (step + 1) % every:
                steps_s.append(t1 - t0)
                continue
            msd, osd = get_state_dict(model, opt)
            nbytes = shard_bytes(msd, osd)
            path = os.path.join(root, f"{mode}_step{step + 1}")
            if pending is not None:  # the previous async save must be done before the next
                pending[0].result()
                complete.append(time.perf_counter() - pending[1])
            t2 = time.perf_counter()
            if mode == "sync":
                dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
                complete.append(time.perf_counter() - t2)
            else:
                pending = (
                    dcp.async_save(
                        {"model": msd, "optim": osd}, checkpoint_id=path, process_group=ckpt_group
                    ),
                    t2,
                )
            stall.append(time.perf_counter() - t2)
        if pending is not None:  # the last async save
            pending[0].result()
            complete.append(time.perf_counter() - pending[1])
        steps_s.sort()
        out.append(SaveStall(mode, steps_s[len(steps_s) // 2], stall, complete, nbytes))
    dist.destroy_process_group(ckpt_group)
    return out


def shard_bytes(model_sd: dict, optim_sd: dict) -> int:
    """Tensor bytes of this rank's part of a (get_state_dict) model and optimizer state: a
    DTensor counts its local shard, what a sharded checkpoint writes for this rank."""
    return sum(
        getattr(t, "_local_tensor", t).nbytes
        for sd in (model_sd, optim_sd["state"])
        for t in _tensors(sd)
    )


def _tensors(sd):
    for v in sd.values():
        yield from (
            _tensors(v) if isinstance(v, dict) else ([v] if isinstance(v, torch.Tensor) else [])
        )


def stack_frames(text: str, marker: str = "hung_job", keep: int = 4) -> list[str]:
    """From a faulthandler dump, the innermost `keep` frames of the thread whose stack passes
    through `marker` (the training code), as 'file:line in function'."""
    for block in text.split("\n\n"):
        if marker not in block:
            continue
        frames = [line.strip() for line in block.splitlines() if line.strip().startswith("File")]
        out = []
        for frame in frames[:keep]:  # File "/path/x.py", line 12 in fn
            path, rest = frame.split('"')[1], frame.split("line ")[1]
            out.append(f"{os.path.basename(path)}:{rest}")
        return out
    return []
