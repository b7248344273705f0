"""The zygote (lab_utils/runtime/engine/zygote.py): an agent forked from it is what a new Python
would be.

Cold launches here, so every test starts an agent. What a rank reports (its environment, command
line, sys.path, threads, its agent's parent) is compared between the zygote and a new Python.
"""

import os
import subprocess
import sys
import time

import pytest

from lab_utils import run
from lab_utils.runtime.engine import zygote
from lab_utils.runtime.engine.forensics import _process_gone  # gone, or a zombie not yet reaped
from lab_utils.runtime.engine.paths import clean_stale_run_dirs

pytestmark = [
    pytest.mark.skipif(
        not hasattr(os, "pidfd_open"), reason="the zygote needs Linux (pidfd_open, /proc)"
    ),
    pytest.mark.usefixtures("own_zygote"),
]


def probe(ctx):
    """What a rank sees: a module-level function, so it travels by reference (sys.path must
    work)."""
    import torch

    agent = os.getppid()
    with open(f"/proc/{agent}/stat") as f:
        agent_parent = int(f.read().rsplit(")", 1)[1].split()[1])
    with open(f"/proc/{agent}/cmdline", "rb") as f:
        agent_cmdline = f.read().split(b"\0")
    return {
        "seen": os.environ.get("LAB_UTILS_TEST_SEEN"),
        "threads": torch.get_num_threads(),
        "agent_parent": agent_parent,
        "agent_cmdline": agent_cmdline,
        "session_leader": os.getsid(0) == agent,
        "cwd": os.getcwd(),
        "here": os.path.dirname(os.path.abspath(__file__)) in sys.path,
    }


@pytest.fixture(scope="module")
def shared_zygote():
    """A shared zygote of this module's own (the suite's is hidden by ``own_zygote``): (process,
    path)."""
    return zygote.start_shared()


@pytest.mark.parametrize("kind", ["zygote", "shared", "new-python"])
def test_an_agent_from_the_zygote_is_what_a_new_python_would_be(
    kind, monkeypatch, tmp_path, request
):
    forked = kind != "new-python"
    monkeypatch.setenv(zygote.SWITCH, "1" if forked else "0")
    if kind == "shared":
        server, path = request.getfixturevalue("shared_zygote")
        monkeypatch.setenv(zygote.SHARED, path)
        _let_go_of_own_zygote()  # a launcher that has one keeps it
    monkeypatch.setenv("LAB_UTILS_TEST_SEEN", "set after the zygote started")
    monkeypatch.chdir(tmp_path)
    results = run(probe, 2, cold=True, quiet=True)
    for rank, r in enumerate(results):
        assert r["seen"] == "set after the zygote started", (
            f"rank {rank}: the launch's environment is missing"
        )
        assert r["threads"] == max(1, len(os.sched_getaffinity(0)) // 2)
        assert r["session_leader"], (
            "the agent must lead its own session (one killpg ends agent and ranks)"
        )
        assert r["cwd"] == str(tmp_path) and r["here"]
        assert r["agent_cmdline"][1:3] == [b"-m", b"lab_utils.runtime.engine.agent"], r[
            "agent_cmdline"
        ][:4]
        assert any(arg.endswith(b"lab_utils/runtime/worker.py") for arg in r["agent_cmdline"])
        if forked:
            assert zygote._ZYGOTE is not None and r["agent_parent"] == zygote._ZYGOTE.pid
            assert (
                (zygote._ZYGOTE.pid == server.pid)
                if kind == "shared"
                else zygote._ZYGOTE.shared is None
            )
        else:
            assert r["agent_parent"] == os.getpid()


def test_an_import_time_variable_that_changed_replaces_the_zygote(monkeypatch):
    monkeypatch.setenv(zygote.SWITCH, "1")
    run(probe, 2, cold=True, quiet=True)
    before = zygote._ZYGOTE
    assert before is not None
    monkeypatch.setenv(
        "TORCH_SHOW_CPP_STACKTRACES",
        "0" if os.environ.get("TORCH_SHOW_CPP_STACKTRACES") == "1" else "1",
    )
    results = run(probe, 2, cold=True, quiet=True)
    assert zygote._ZYGOTE is not before and results[0]["agent_parent"] == zygote._ZYGOTE.pid
    before.proc.wait(timeout=10)  # the old zygote exits once its launcher lets go of it


def test_a_zygote_that_cannot_start_falls_back_to_new_pythons(monkeypatch, capfd):
    def refuse(self, env):
        raise OSError("the zygote did not start: (simulated)")

    monkeypatch.setenv(zygote.SWITCH, "1")
    monkeypatch.setattr(zygote, "_ZYGOTE", None)
    monkeypatch.setattr(zygote.Zygote, "__init__", refuse)
    monkeypatch.setattr(zygote, "_FAILED", False)
    results = run(probe, 2, cold=True, quiet=True)
    assert [r["agent_parent"] for r in results] == [os.getpid()] * 2
    assert (
        "starting agents without the zygote (OSError: the zygote did not start: (simulated))"
        in capfd.readouterr().err
    )
    assert not zygote.enabled()


def _let_go_of_own_zygote() -> None:
    if zygote._ZYGOTE is not None and zygote._ZYGOTE.shared is None:
        zygote._ZYGOTE.stop()


def test_a_launcher_with_other_import_time_variables_does_not_use_the_shared_zygote(
    monkeypatch, shared_zygote
):
    server, path = shared_zygote
    monkeypatch.setenv(zygote.SWITCH, "1")
    monkeypatch.setenv(zygote.SHARED, path)
    _let_go_of_own_zygote()
    run(probe, 2, cold=True, quiet=True)
    assert zygote._ZYGOTE.pid == server.pid
    monkeypatch.setenv(
        "TORCH_SHOW_CPP_STACKTRACES",
        "0" if os.environ.get("TORCH_SHOW_CPP_STACKTRACES") == "1" else "1",
    )
    results = run(probe, 2, cold=True, quiet=True)
    assert (
        zygote._ZYGOTE.shared is None
        and results[0]["agent_parent"] == zygote._ZYGOTE.pid != server.pid
    )


def test_a_shared_zygote_ends_with_the_process_that_started_it(tmp_path):
    """Whatever ends its starter (here SIGKILL: no atexit), the shared zygote exits: it holds the
    read end of the starter's lifeline. A launcher that finds it gone starts a zygote of its own;
    the socket's folder is a run folder, removed by the next launch."""
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from lab_utils.runtime.engine import zygote; "
            "p, path = zygote.start_shared(); "
            "print(p.pid, path, flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pid, path = starter.stdout.readline().split()
        assert zygote.Zygote(dict(os.environ), path).pid == int(pid)  # it answers
    finally:
        starter.kill()
        starter.wait()
    deadline = time.monotonic() + 10
    while not _process_gone(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _process_gone(int(pid)), "the shared zygote outlived its starter"
    with pytest.raises(OSError):
        zygote.Zygote(dict(os.environ), path)
    clean_stale_run_dirs()  # what the next launch does: the killed starter's folder goes
    assert not os.path.exists(os.path.dirname(path))
