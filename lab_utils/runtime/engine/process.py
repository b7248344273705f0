"""The torchrun process behind a run or a pool: its command line, starting and killing it.

A cold run and a pool both start ranks through ``start_agent``: torchrun (through ``agent.py``,
forked from the zygote where it can: ``zygote.py``) with the ranks forked from it, in a process
group of its own so one ``killpg`` ends everything, holding the read end of the caller's
lifeline (``lifeline.py``).
"""

from __future__ import annotations

import atexit
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass

from lab_utils.runtime.engine import lifeline, zygote
from lab_utils.runtime.engine.paths import AGENT, PACKAGE_ROOT, WORKER_PATH

_LIVE: set["Agent"] = set()  # agents still running, for atexit


# ---------------------------------------------------------------------------- agents
def torchrun_command(world_size: int, worker_args: list[str]) -> list[str]:
    """torchrun on this machine only, with its ranks forked from the agent.

    This is ``--standalone`` spelled out, with one change: the rendezvous address is the
    NUMBER 127.0.0.1, not the name localhost. A forked rank must never resolve a host
    name: if another agent thread held glibc's resolver lock at the moment of the fork,
    the rank waits on that lock forever (seen here about once in 20 launches).
    """
    return [
        *AGENT,
        "--nnodes",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "127.0.0.1:0",  # port 0: a free port, so two runs never collide
        "--rdzv-id",
        uuid.uuid4().hex,
        "--nproc-per-node",
        str(world_size),
        "--monitor-interval",
        "0.1",
        "--run-path",
        "--start-method",
        "fork",  # ranks fork from the agent: torch already imported
        WORKER_PATH,
        *worker_args,
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


def start_agent(
    world_size: int,
    worker_args: list[str],
    threads: int,
    preload: tuple[str, ...],
    extra_env: dict[str, str] | None = None,
) -> Agent:
    """Start torchrun (through lab_utils.runtime.engine.agent) with the ranks' environment."""
    # The ranks import what the caller can import: a function defined in a test module or a
    # script travels by reference, so its module must be importable on the ranks too.
    python_path = os.pathsep.join(dict.fromkeys([PACKAGE_ROOT, *(p for p in sys.path if p)]))
    read_fd, write_fd = lifeline.create()
    env = dict(
        os.environ,
        OMP_NUM_THREADS=str(threads),
        LAB_UTILS_ROOT=PACKAGE_ROOT,
        PYTHONPATH=python_path,
        PYTHONUNBUFFERED="1",
        LAB_UTILS_PRELOAD=",".join(preload),
        # gloo picks its network interface by resolving the host name unless told;
        # name it, so forked ranks never enter the resolver (see torchrun_command)
        GLOO_SOCKET_IFNAME="lo",
        **{lifeline.ENV_FD: str(read_fd)},
        **(extra_env or {}),
    )
    command = torchrun_command(world_size, worker_args)
    try:
        # forked from the zygote (torch already imported) where it can, else a new Python
        proc = zygote.fork_agent(command[len(AGENT) :], env, read_fd) or subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            pass_fds=(read_fd,),
            start_new_session=True,
        )  # own process group: one killpg ends all
    finally:
        os.close(read_fd)  # the children hold it; the write end stays here alone
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    agent = Agent(proc, lines, write_fd)
    _LIVE.add(agent)
    return agent
