"""A fork server for torchrun agents: torch is imported once per launcher, not once per launch (lab 00).

Every run that warm ranks do not serve (a cold run, a pool's start, the restart after a failure)
starts torchrun's agent, and a new Python spends its first seconds importing torch (about 3 s of
CPU) and the pool's preload ``torch._dynamo`` (about 3 s more). One pass over the multi-rank tests
made 115 launches in 19 minutes on 2 cores, each paying that. The zygote is ONE helper
process per launcher (a kernel, a script, a test worker) that has done those imports once. Each
agent is forked from it: a copy-on-write copy, ready in milliseconds. The ranks are then forked
from the agent, as before.

The agent gets what ``python -m lab_utils.runtime.agent ...`` started by ``subprocess`` would have:
a session of its own (one killpg ends it and its ranks), stdout/stderr into the launcher's pipe,
the launcher's environment, working directory and sys.path, the launcher's lifeline (it dies with
the launcher, ``lifeline.py``), a fresh import of lab_utils, and its own command line in ``ps``
(/proc/PID/cmdline). /proc/PID/environ still shows the zygote's start-up environment.

Falls back to a new Python per agent (the old way) when fork servers are off (LAB_UTILS_ZYGOTE=0),
not available (no ``os.pidfd_open``: not Linux), or when the zygote cannot start or answer. A
process forked from the launcher starts a zygote of its own. A variable that torch may read while it is imported (TORCH_*, OMP_*, ...)
that changed since the zygote started replaces the zygote, so no agent inherits a stale one.
"""
from __future__ import annotations

import atexit
import ctypes
import gc
import importlib
import os
import pickle
import select
import socket
import subprocess
import sys
import threading

from lab_utils.runtime import lifeline

SWITCH = "LAB_UTILS_ZYGOTE"
IMPORTS = ("torch", "torch.distributed.run", "torch._dynamo")  # _dynamo: the pool's preload
# Read while torch is imported, so part of a zygote's identity; the launcher sets the rest per launch.
_IMPORT_TIME = ("TORCH", "PYTORCH", "OMP_", "MKL", "KMP_", "GOMP", "CUDA", "NCCL", "GLOO", "LD_", "PYTHON")
_PER_LAUNCH = {"OMP_NUM_THREADS", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTORCH_NVML_BASED_CUDA_CHECK"}
_ARGV_ROOM = 8192  # blank start-up argument: the room an agent's command line is written into
REPLY_TIMEOUT_S = 180.0  # the zygote's imports on a loaded laptop, with margin
_ZYGOTE: "Zygote | None" = None
_FAILED = False  # it could not start or answer here once: new Pythons from then on
_LOCK = threading.Lock()


def enabled() -> bool:
    return (os.environ.get(SWITCH, "1") != "0" and not _FAILED and hasattr(os, "pidfd_open")
            and hasattr(socket, "send_fds"))


def _identity(env: dict[str, str]) -> tuple:
    return (sys.executable, tuple(sorted((k, v) for k, v in env.items()
                                         if k.startswith(_IMPORT_TIME) and k not in _PER_LAUNCH)))


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
    """The launcher's side: start the zygote, ask it for agents."""

    def __init__(self, env: dict[str, str]):
        from lab_utils.runtime.process import PACKAGE_ROOT

        self.owner, self.identity = os.getpid(), _identity(env)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        start_env = dict(env, PYTORCH_NVML_BASED_CUDA_CHECK="1", PYTHONUNBUFFERED="1")
        start_env.pop(lifeline.ENV_FD, None)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lab_utils.runtime.zygote", str(theirs.fileno()), " " * _ARGV_ROOM],
                env=start_env, cwd=PACKAGE_ROOT, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        finally:
            theirs.close()
        self.sock.settimeout(REPLY_TIMEOUT_S)
        self.closed = False
        try:
            reply = socket.recv_fds(self.sock, 1 << 16, 0)[0]
        except BaseException:
            self.stop()
            raise
        if reply != b"ready":
            self.stop()
            raise OSError("the zygote did not start: " + (reply.decode(errors="replace")[-2000:]
                                                           or "it exited before it was ready"))

    def fork_agent(self, argv: list[str], env: dict[str, str], lifeline_fd: int) -> ForkedAgent:
        """An agent running ``python -m lab_utils.runtime.agent *argv`` in ``env``."""
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
        RUSAGE_CHILDREN, as a new Python's would (``time make test``, benchmarks/cpu_per_test.py)."""
        self.closed = True
        self.sock.close()
        try:
            self.proc.wait(timeout=wait_s)
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
            if _ZYGOTE is not None and (_ZYGOTE.owner != os.getpid() or _ZYGOTE.closed
                                        or _ZYGOTE.identity != _identity(env)):
                if _ZYGOTE.owner == os.getpid():
                    _ZYGOTE.stop()
                _ZYGOTE = None
            if _ZYGOTE is None:
                _ZYGOTE = Zygote(env)
            return _ZYGOTE.fork_agent(argv, env, lifeline_fd)
        except (OSError, EOFError, pickle.PickleError) as exc:
            print(f"[lab_utils] note: starting agents without the zygote ({type(exc).__name__}: {exc})",
                  file=sys.stderr, flush=True)
            if _ZYGOTE is not None and _ZYGOTE.owner == os.getpid():
                _ZYGOTE.stop()
            _ZYGOTE, _FAILED = None, True
            return None


@atexit.register  # registered before process.py's, so it runs after the agents were killed
def _stop() -> None:
    if _ZYGOTE is not None and _ZYGOTE.owner == os.getpid():
        _ZYGOTE.stop(wait_s=2.0)


# ------------------------------------------------------------------- the zygote's side
def serve(fd: int) -> dict | None:
    """Fork an agent per request until the launcher is gone. Returns in each forked child (that
    agent's request), or None if the imports failed."""
    sock = socket.socket(fileno=fd)
    try:
        for name in IMPORTS:
            importlib.import_module(name)
    except BaseException as exc:
        sock.send(f"importing {name} failed: {type(exc).__name__}: {exc}".encode())
        return None
    gc.freeze()  # the imports' objects: a forked agent's garbage collector skips them (fewer copied pages)
    sock.send(b"ready")
    while True:
        if select.select([sock], [], [], 1.0)[0]:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
            if not msg:  # the launcher closed its end or died: nothing here to clean up
                _reap()  # agents that exited: their CPU time joins this process's children's
                os._exit(0)
            request = pickle.loads(msg)
            request["out"], request["lifeline"] = fds
            if _preload_torch(request["env"]):
                gc.freeze()
            pid = os.fork()
            if pid == 0:
                sock.close()
                return request
            for got in fds:
                os.close(got)
            pidfd = os.pidfd_open(pid)  # before any reaping: it names this child, never a reused pid
            socket.send_fds(sock, [pickle.dumps(pid)], [pidfd])
            os.close(pidfd)
        _reap()


def _reap() -> None:
    """Collect the agents that exited (no zombies; their CPU time is counted)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _preload_torch(env: dict[str, str]) -> bool:
    """Import a launch's torch preloads here too, so later launches get them free (the course's
    own modules are always imported fresh in the agent: they may change while the zygote lives).
    True if anything new was imported."""
    new = False
    for name in filter(None, env.get("LAB_UTILS_PRELOAD", "").split(",")):
        if name.split(".")[0] == "torch" and name not in sys.modules:
            try:
                importlib.import_module(name)
                new = True
            except Exception:  # noqa: BLE001 - the agent imports it again and reports the error
                pass
    return new


def _show_command_line(args: list[str]) -> None:
    """Write the agent's command line over the zygote's blank one, for ps and /proc/PID/cmdline."""
    from lab_utils.runtime.process import stat_fields

    try:
        fields = stat_fields("self")
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (proc(5), fields 48-49)
    except (OSError, ValueError, IndexError):
        return
    text = "\0".join(args).encode()[:end - start - 1]
    ctypes.memmove(start, text + b"\0" * (end - start - len(text)), end - start)


def become_agent(request: dict, base_path: list[str]) -> None:
    """In the forked child: take the launch's session, streams, environment and paths, then run
    the agent (``agent.main``) as ``python -m lab_utils.runtime.agent`` would."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(request["out"], 1)
    os.dup2(request["out"], 2)
    os.close(devnull)
    os.close(request["out"])
    os.set_inheritable(request["lifeline"], True)
    env = dict(request["env"], **{lifeline.ENV_FD: str(request["lifeline"])})
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    sys.path[:] = [request["cwd"], *filter(None, env.get("PYTHONPATH", "").split(os.pathsep)), *base_path]
    for name in [m for m in sys.modules if m == "lab_utils" or m.startswith("lab_utils.")]:
        del sys.modules[name]  # the agent and its ranks import the course code fresh, from disk
    importlib.invalidate_caches()
    from lab_utils.runtime import agent
    from lab_utils.runtime.process import AGENT

    _show_command_line([*AGENT, *request["argv"]])

    agent.main(request["argv"])


if __name__ == "__main__":
    _start_path = set(filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))) | {os.getcwd()}
    _base = [p for p in sys.path[1:] if p not in _start_path]
    _request = serve(int(sys.argv[1]))
    if _request is not None:  # a forked child: from here on, an agent
        become_agent(_request, _base)
