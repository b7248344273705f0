"""The torchrun process behind a run or a pool: its folder, its command line, starting and killing it.

``launch.run`` and ``pool.Pool`` both start ranks through ``start_agent``: torchrun (through
``lab_utils.runtime.agent``, forked from the zygote where it can: ``zygote.py``) with the ranks
forked from it, in a process group of its own so one ``killpg`` ends everything, holding the read
end of the caller's lifeline (``lifeline.py``).
Run folders (``$TMPDIR/lab_utils_run_*``) carry their owner's pid and start time; a folder whose
owner is gone is removed by the next launch.
"""
from __future__ import annotations

import atexit
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass

from lab_utils.runtime import lifeline, zygote

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
TMP_PREFIX = "lab_utils_run_"
AGENT = [sys.executable, "-m", "lab_utils.runtime.agent"]  # torchrun, after importing LAB_UTILS_PRELOAD
_LIVE: set["Agent"] = set()  # agents still running, for atexit


# ------------------------------------------------------------------------ run folders
def stat_fields(pid: int | str) -> list[str]:
    """/proc/PID/stat from field 3 (state) on: index i is field i + 3 of proc(5). The command name
    (field 2) may hold spaces and parentheses, so the split starts after its last ')'."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def _start_time(pid: int) -> str | None:
    try:
        return stat_fields(pid)[19]  # field 22: start time since boot
    except (OSError, IndexError):
        return None


def make_run_dir() -> str:
    """A fresh folder for one run (or one pool), stamped with its owner process."""
    clean_stale_run_dirs()
    path = tempfile.mkdtemp(prefix=TMP_PREFIX)
    with open(os.path.join(path, "owner"), "w") as f:
        f.write(f"{os.getpid()} {_start_time(os.getpid())}")
    return path


def clean_stale_run_dirs() -> None:
    """Remove run folders whose owner process is gone (a killed kernel, a restart)."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if not name.startswith(TMP_PREFIX) or not os.path.isdir(path):
            continue
        try:
            with open(os.path.join(path, "owner")) as f:
                pid, started = f.read().split()
            alive = _start_time(int(pid)) == started
        except (OSError, ValueError):  # no owner file: a folder from an older version
            alive = time.time() - os.path.getmtime(path) < 3600
        if not alive:
            shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------- agents
def torchrun_command(world_size: int, worker_args: list[str]) -> list[str]:
    """torchrun on this machine only, with its ranks forked from the agent.

    This is ``--standalone`` spelled out, with one change: the rendezvous address is the
    NUMBER 127.0.0.1, not the name localhost. A forked rank must never resolve a host
    name: if another agent thread held glibc's resolver lock at the moment of the fork,
    the rank waits on that lock forever (seen here about once in 20 launches).
    """
    return [
        *AGENT, "--nnodes", "1", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "127.0.0.1:0",  # port 0: a free port, so two runs never collide
        "--rdzv-id", uuid.uuid4().hex,
        "--nproc-per-node", str(world_size),
        "--monitor-interval", "0.1",
        "--run-path", "--start-method", "fork",  # ranks fork from the agent: torch already imported
        WORKER_PATH, *worker_args,
    ]


@dataclass(eq=False)
class Agent:
    """A running torchrun agent (and the ranks it forked): its output lines and lifeline."""

    proc: "subprocess.Popen | zygote.ForkedAgent"
    lines: "queue.Queue[str | None]"
    lifeline_fd: int

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (agent + every rank) and reap it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self.lifeline_fd >= 0:
            os.close(self.lifeline_fd)
            self.lifeline_fd = -1
        _LIVE.discard(self)


@atexit.register
def _kill_all_live() -> None:
    for agent in list(_LIVE):
        agent.kill()


def _reader(stream, lines: "queue.Queue[str | None]") -> None:
    for raw in iter(stream.readline, b""):
        lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
    lines.put(None)


def start_agent(world_size: int, worker_args: list[str], threads: int, preload: tuple[str, ...],
                extra_env: dict[str, str] | None = None) -> Agent:
    """Start torchrun (through lab_utils.runtime.agent) with the ranks' environment."""
    # The ranks import what the caller can import: a function defined in a test module or a
    # script travels by reference, so its module must be importable on the ranks too.
    python_path = os.pathsep.join(dict.fromkeys([PACKAGE_ROOT, *(p for p in sys.path if p)]))
    read_fd, write_fd = lifeline.create()
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), LAB_UTILS_ROOT=PACKAGE_ROOT,
               PYTHONPATH=python_path, PYTHONUNBUFFERED="1", LAB_UTILS_PRELOAD=",".join(preload),
               # gloo picks its network interface by resolving the host name unless told;
               # name it, so forked ranks never enter the resolver (see torchrun_command)
               GLOO_SOCKET_IFNAME="lo", **{lifeline.ENV_FD: str(read_fd)}, **(extra_env or {}))
    command = torchrun_command(world_size, worker_args)
    try:
        # forked from the zygote (torch already imported) where it can, else a new Python
        proc = zygote.fork_agent(command[len(AGENT):], env, read_fd) or subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, pass_fds=(read_fd,),
            start_new_session=True)  # own process group: one killpg ends all
    finally:
        os.close(read_fd)  # the children hold it; the write end stays here alone
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    agent = Agent(proc, lines, write_fd)
    _LIVE.add(agent)
    return agent
