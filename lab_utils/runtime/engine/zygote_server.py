"""The zygote's side of ``zygote.py``: import torch once, then fork an agent per request.

    python -m lab_utils.runtime.engine.zygote_server FD [LIFELINE_FD] <room for a command line>

One fd: a launcher's own zygote, serving that launcher alone over a socket pair until it lets go.
Two: a shared zygote (``zygote.start_shared``), accepting launchers on a listening socket until the
process that started it is gone. Each forked child becomes the agent (``become_agent``).
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import os
import pickle
import select
import socket
import sys

from lab_utils.runtime.engine import lifeline
from lab_utils.runtime.engine.zygote import IMPORTS, identity


def serve(fd: int) -> dict | None:
    """Fork an agent per request until the launcher is gone. Returns in each forked child (that
    agent's request), or None if the imports failed."""
    sock = socket.socket(fileno=fd)
    if _import(sock) is None:
        return None
    while True:
        if select.select([sock], [], [], 1.0)[0]:
            request = _answer(sock, [sock])
            if request is None:  # the launcher closed its end or died: nothing here to clean up
                _reap()  # agents that exited: their CPU time joins this process's children's
                os._exit(0)
            if request:
                return request
        _reap()


def serve_shared(listen_fd: int, lifeline_fd: int) -> dict | None:
    """A shared zygote: serve every launcher that connects, until the process that started it is
    gone (end-of-file on its lifeline). Returns in each forked child, as ``serve``."""
    listener = socket.socket(fileno=listen_fd)
    clients: list[socket.socket] = []
    hello = _import(None)
    if hello is None:
        return None
    while True:
        for ready in select.select([listener, lifeline_fd, *clients], [], [], 1.0)[0]:
            if ready == lifeline_fd:
                _reap()
                os._exit(0)
            if ready is listener:
                clients.extend(_greet(listener, hello))
                continue
            try:
                request = _answer(ready, [listener, *clients], lifeline_fd)
            except OSError:  # a launcher that died mid-request: it alone is dropped
                request = None
            if request is None:
                clients.remove(ready)
                ready.close()
            elif request:
                return request
        _reap()


def _greet(listener: socket.socket, hello: bytes) -> list[socket.socket]:
    """Accept a launcher and send it the hello ([] if it is already gone)."""
    try:
        client = listener.accept()[0]
    except OSError:
        return []
    try:
        client.send(hello)
    except OSError:
        client.close()
        return []
    return [client]


def _import(sock: socket.socket | None) -> bytes | None:
    """The imports every agent shares. Returns the hello each launcher reads first (also sent on
    ``sock``): "ready", this zygote's pid and the import-time variables it started with (taken
    before
    the imports, which may set some); None if an import failed."""
    hello = b"ready" + pickle.dumps((os.getpid(), identity(dict(os.environ))))
    try:
        for name in IMPORTS:
            importlib.import_module(name)
    except BaseException as exc:
        if sock is not None:
            sock.send(f"importing {name} failed: {type(exc).__name__}: {exc}".encode())
        return None
    # the imports' objects: a forked agent's garbage collector skips them (fewer copied pages)
    gc.freeze()
    if sock is not None:
        sock.send(hello)
    return hello


def _answer(
    sock: socket.socket, close_in_child: list[socket.socket], *fds_in_child: int
) -> dict | None:
    """Fork an agent for the request waiting on ``sock``: its request in the child, {} in the
    zygote,
    None if the launcher closed its end. The child closes the zygote's own sockets and fds."""
    msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
    if not msg:
        return None
    request = pickle.loads(msg)
    request["out"], request["lifeline"] = fds
    if _preload_torch(request["env"]):
        gc.freeze()
    pid = os.fork()
    if pid == 0:
        for other in close_in_child:
            other.close()
        for fd in fds_in_child:
            os.close(fd)
        return request
    for got in fds:
        os.close(got)
    pidfd = os.pidfd_open(pid)  # before any reaping: it names this child, never a reused pid
    socket.send_fds(sock, [pickle.dumps(pid)], [pidfd])
    os.close(pidfd)
    return {}


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
    from lab_utils.runtime.engine.paths import stat_fields

    try:
        fields = stat_fields("self")
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (proc(5), fields 48-49)
    except (OSError, ValueError, IndexError):
        return
    text = "\0".join(args).encode()[: end - start - 1]
    ctypes.memmove(start, text + b"\0" * (end - start - len(text)), end - start)


def become_agent(request: dict, base_path: list[str]) -> None:
    """In the forked child: take the launch's session, streams, environment and paths, then run
    the agent (``agent.main``) as ``python -m lab_utils.runtime.engine.agent`` would."""
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
    sys.path[:] = [
        request["cwd"],
        *filter(None, env.get("PYTHONPATH", "").split(os.pathsep)),
        *base_path,
    ]
    for name in [m for m in sys.modules if m == "lab_utils" or m.startswith("lab_utils.")]:
        del sys.modules[name]  # the agent and its ranks import the course code fresh, from disk
    importlib.invalidate_caches()
    from lab_utils.runtime.engine import agent
    from lab_utils.runtime.engine.paths import AGENT

    _show_command_line([*AGENT, *request["argv"]])

    agent.main(request["argv"])


if __name__ == "__main__":
    _start_path = set(filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))) | {
        os.getcwd()
    }
    _base = [p for p in sys.path[1:] if p not in _start_path]
    _fds = [int(a) for a in sys.argv[1:-1]]  # one: a launcher's own zygote; two: a shared one
    _request = serve(*_fds) if len(_fds) == 1 else serve_shared(*_fds)
    if _request is not None:  # a forked child: from here on, an agent
        become_agent(_request, _base)
