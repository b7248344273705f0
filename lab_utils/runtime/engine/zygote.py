"""A fork server for torchrun agents: torch is imported once per launcher, not once per launch (lab
00).

Every run that warm ranks do not serve (a cold run, a pool's start, the restart after a failure)
starts torchrun's agent, and a new Python spends its first seconds importing torch (about 3 s of
CPU) and the pool's preload ``torch._dynamo`` (about 3 s more). One pass over the multi-rank tests
made 115 launches in 19 minutes on 2 cores, each paying that. The zygote is ONE helper
process per launcher (a kernel, a script, a test worker) that has done those imports once. Each
agent is forked from it: a copy-on-write copy, ready in milliseconds. The ranks are then forked
from the agent, as before.

The agent gets what ``python -m lab_utils.runtime.engine.agent ...`` started by ``subprocess``
would have:
a session of its own (one killpg ends it and its ranks), stdout/stderr into the launcher's pipe,
the launcher's environment, working directory and sys.path, the launcher's lifeline (it dies with
the launcher, ``lifeline.py``), a fresh import of lab_utils, and its own command line in ``ps``
(/proc/PID/cmdline). /proc/PID/environ still shows the zygote's start-up environment.

The zygote's own code (its imports, the fork, becoming the agent) is ``zygote_server.py``.
Falls back to a new Python per agent (the old way) when fork servers are off (LAB_UTILS_ZYGOTE=0),
not available (no ``os.pidfd_open``: not Linux), or when the zygote cannot start or answer. A
process forked from the launcher starts a zygote of its own. A variable that torch may read while
it is imported (TORCH_*, OMP_*, ...)
that changed since the zygote started replaces the zygote, so no agent inherits a stale one.

A SHARED zygote serves every launcher that inherits ``LAB_UTILS_ZYGOTE_SOCKET`` (its socket's path)
and was started with the same import-time variables: the test suite starts one (tests/conftest.py),
so its workers, its notebook kernels and the scripts its tests start do torch's imports once in all,
not once each (46 zygotes of about 3.3 CPU-s each per suite run). It lives as long as the process
that
started it (``start_shared``). A launcher whose variables differ, or that cannot reach it, starts
its own;
one that already has its own keeps it.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import shutil
import socket
import subprocess
import sys
import threading

from lab_utils.runtime.engine import lifeline
from lab_utils.runtime.engine.paths import PACKAGE_ROOT, make_run_dir

SWITCH = "LAB_UTILS_ZYGOTE"
SHARED = "LAB_UTILS_ZYGOTE_SOCKET"  # the path of a shared zygote's socket (start_shared)
IMPORTS = ("torch", "torch.distributed.run", "torch._dynamo")  # _dynamo: the pool's preload
# Read while torch is imported, so part of a zygote's identity; the launcher sets the rest per
# launch.
_IMPORT_TIME = (
    "TORCH",
    "PYTORCH",
    "OMP_",
    "MKL",
    "KMP_",
    "GOMP",
    "CUDA",
    "NCCL",
    "GLOO",
    "LD_",
    "PYTHON",
)
# GLOO_SOCKET_IFNAME: read when a rank creates its process group. TORCHINDUCTOR_CACHE_DIR: read when
# inductor compiles, and written into os.environ by torch itself on first use
# (cache_dir_utils.cache_dir),
# which started 8 extra zygotes per suite run.
_PER_LAUNCH = {
    "OMP_NUM_THREADS",
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "PYTORCH_NVML_BASED_CUDA_CHECK",
    "GLOO_SOCKET_IFNAME",
    "TORCHINDUCTOR_CACHE_DIR",
}
_ARGV_ROOM = 8192  # blank start-up argument: the room an agent's command line is written into
REPLY_TIMEOUT_S = 180.0  # the zygote's imports on a loaded laptop, with margin
_ZYGOTE: "Zygote | None" = None
_FAILED = False  # it could not start or answer here once: new Pythons from then on
_LOCK = threading.Lock()
_UNREACHABLE = (OSError, EOFError, pickle.PickleError)  # a zygote that cannot start or answer


def enabled() -> bool:
    return (
        os.environ.get(SWITCH, "1") != "0"
        and not _FAILED
        and hasattr(os, "pidfd_open")
        and hasattr(socket, "send_fds")
    )


def identity(env: dict[str, str]) -> tuple:
    return (
        sys.executable,
        tuple(
            sorted(
                (k, v)
                for k, v in env.items()
                if k.startswith(_IMPORT_TIME) and k not in _PER_LAUNCH
            )
        ),
    )


class ForkedAgent:
    """What ``Agent`` needs of a subprocess.Popen, for an agent forked by the zygote."""

    def __init__(self, pid: int, pidfd: int, stdout):
        self.pid, self._pidfd, self.stdout = pid, pidfd, stdout

    def poll(self) -> int | None:
        """None while the agent runs, else 0 (its exit status is the zygote's to collect)."""
        return self.wait(0) if self._pidfd >= 0 else 0

    def wait(self, timeout: float | None = None) -> int | None:
        if self._pidfd >= 0:
            if not select.select([self._pidfd], [], [], timeout)[0]:  # readable once it exited
                if timeout == 0:
                    return None
                raise subprocess.TimeoutExpired(f"agent {self.pid}", timeout)
            os.close(self._pidfd)
            self._pidfd = -1
        return 0


class Zygote:
    """The launcher's side: start the zygote (or connect to a shared one), ask it for agents."""

    def __init__(self, env: dict[str, str], shared: str | None = None):
        """A zygote of this launcher's own, or with ``shared`` the one listening there (OSError if
        it is gone or was started with other import-time variables)."""
        self.owner, self.identity, self.shared = os.getpid(), identity(env), shared
        self.closed, self.proc = False, None
        if shared is None:
            self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self.proc = subprocess.Popen(
                    _server_command(str(theirs.fileno())),
                    env=_start_env(env),
                    **_server_options((theirs.fileno(),)),
                )
            finally:
                theirs.close()
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(REPLY_TIMEOUT_S)
        try:
            if shared is not None:
                self.sock.connect(shared)
            reply = self.sock.recv(
                1 << 16
            )  # "ready" once its imports are done, then (pid, identity)
        except BaseException:
            self.stop()
            raise
        if not reply.startswith(b"ready"):
            self.stop()
            raise OSError(
                "the zygote did not start: "
                + (reply.decode(errors="replace")[-2000:] or "it exited before it was ready")
            )
        self.pid, theirs = pickle.loads(reply[len(b"ready") :])
        if theirs != self.identity:
            self.stop()
            raise OSError("the shared zygote was started with other import-time variables")

    def fork_agent(self, argv: list[str], env: dict[str, str], lifeline_fd: int) -> ForkedAgent:
        """An agent running ``python -m lab_utils.runtime.engine.agent *argv`` in ``env``."""
        read_fd, write_fd = os.pipe()
        try:
            request = pickle.dumps({"argv": argv, "env": env, "cwd": os.getcwd()})
            socket.send_fds(self.sock, [request], [write_fd, lifeline_fd])
            reply, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 1)
            if not reply or not fds:
                raise OSError("the zygote exited")
        except BaseException:
            os.close(read_fd)
            self.stop()  # a request cut short (an interrupt, a timeout) leaves the two out of step
            raise
        finally:
            os.close(write_fd)  # the agent holds it now: end-of-file once it and its ranks are gone
        return ForkedAgent(pickle.loads(reply), fds[0], os.fdopen(read_fd, "rb"))

    def stop(self, wait_s: float = 0.0) -> None:
        """Let go of the zygote: it exits at once at end-of-file (its agents live on until killed).
        Waiting for it reaps it, so its CPU time and its agents' count in this process's
        RUSAGE_CHILDREN, as a new Python's would (``time make test``,
        benchmarks/cpu_per_test.py)."""
        self.closed = True
        self.sock.close()
        if self.proc is None:  # a shared zygote: it serves others on
            return
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass


def _start_env(env: dict[str, str]) -> dict[str, str]:
    start_env = dict(env, PYTORCH_NVML_BASED_CUDA_CHECK="1", PYTHONUNBUFFERED="1")
    start_env.pop(lifeline.ENV_FD, None)
    start_env.pop(SHARED, None)
    return start_env


def _server_command(*fds: str) -> list[str]:
    return [sys.executable, "-m", "lab_utils.runtime.engine.zygote_server", *fds, " " * _ARGV_ROOM]


def _server_options(fds: tuple[int, ...]) -> dict:
    return dict(
        cwd=PACKAGE_ROOT,
        pass_fds=fds,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def start_shared() -> tuple[subprocess.Popen, str]:
    """Start a shared zygote for the launchers this process starts; returns it and its socket's
    path,
    which the caller puts in ``LAB_UTILS_ZYGOTE_SOCKET``. Its imports run while the caller goes on
    (a launcher that connects meanwhile waits for them). It exits when this process does, however
    that happens: it holds the read end of this process's lifeline (lifeline.py), never written
    to."""
    folder = make_run_dir()  # stamped with this process: removed by a later launch if it is killed
    path = os.path.join(folder, "zygote.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    read_fd, write_fd = lifeline.create()  # the write end stays open here until this process ends
    try:
        proc = subprocess.Popen(
            _server_command(str(listener.fileno()), str(read_fd)),
            env=_start_env(dict(os.environ)),
            **_server_options((listener.fileno(), read_fd)),
        )
    finally:
        listener.close()
        os.close(read_fd)
    atexit.register(_end_shared, proc, folder, write_fd)
    return proc, path


def _end_shared(proc: subprocess.Popen, folder: str, write_fd: int) -> None:
    """At exit: end the zygote's lifeline now, and reap it (its agents' CPU time is counted)."""
    os.close(write_fd)
    shutil.rmtree(folder, ignore_errors=True)
    try:
        proc.wait(timeout=2.0)
    except subprocess.TimeoutExpired:
        pass


def fork_agent(argv: list[str], env: dict[str, str], lifeline_fd: int) -> ForkedAgent | None:
    """An agent forked from this process's zygote (started, or replaced, on demand); None when
    fork servers are off or fail here: the caller then starts a new Python."""
    global _ZYGOTE, _FAILED
    if not enabled():
        return None
    with _LOCK:
        try:
            shared = os.environ.get(SHARED) or None
            if _ZYGOTE is not None and (
                _ZYGOTE.owner != os.getpid()
                or _ZYGOTE.closed
                or _ZYGOTE.identity != identity(env)
                or _ZYGOTE.shared not in (None, shared)
            ):
                if _ZYGOTE.owner == os.getpid():
                    _ZYGOTE.stop()
                _ZYGOTE = None
            if _ZYGOTE is None and shared is not None:
                try:
                    _ZYGOTE = Zygote(env, shared)
                except _UNREACHABLE:
                    pass  # gone, or other variables: a zygote of our own, as without it
            if _ZYGOTE is None:
                _ZYGOTE = Zygote(env)
            return _ZYGOTE.fork_agent(argv, env, lifeline_fd)
        except _UNREACHABLE as exc:
            print(
                f"[lab_utils] note: starting agents without the zygote ({type(exc).__name__}: "
                f"{exc})",
                file=sys.stderr,
                flush=True,
            )
            if _ZYGOTE is not None and _ZYGOTE.owner == os.getpid():
                _ZYGOTE.stop()
            _ZYGOTE, _FAILED = None, True
            return None


@atexit.register  # registered before process.py's, so it runs after the agents were killed
def _stop() -> None:
    if _ZYGOTE is not None and _ZYGOTE.owner == os.getpid():
        _ZYGOTE.stop(wait_s=2.0)
