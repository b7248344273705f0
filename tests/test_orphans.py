"""No orphan ranks: whatever ends the process that launched them, every rank and agent dies.

Each test starts a separate Python process (a stand-in for a notebook kernel, a script or the
CLI) that launches ranks, then ends it with SIGTERM (``kill PID``, coreutils ``timeout``, a
supervisor) or SIGKILL (the OOM killer), and checks that no rank of THAT process survives 2 s
later. The ranks are found by a marker in their environment, so other tests' ranks never count.
"""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid

import pytest

from lab_utils.runtime.engine.paths import TMP_PREFIX, clean_stale_run_dirs

pytestmark = pytest.mark.usefixtures("own_zygote")  # ranks are found by their start-up environment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = "LAB_UTILS_TEST_MARK"


def marked_pids(mark: str, exclude: int) -> list[int]:
    """Live processes (not zombies) whose environment carries ``MARK=mark``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"{MARK}={mark}".encode() not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        if int(pid) != exclude:
            found.append(int(pid))
    return found


def gone_within(mark: str, exclude: int, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := marked_pids(mark, exclude)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _like_a_fresh_process() -> None:
    """SIGINT as a terminal or a kernel has it. A child inherits an IGNORED SIGINT, and a Python
    started that way never raises KeyboardInterrupt. The suite itself may run with SIGINT ignored:
    a non-interactive shell gives every command it starts in the background (``make test &``,
    ``nohup ... &``, a CI runner's job) SIGINT and SIGQUIT ignored (POSIX, "Asynchronous Lists").
    That is why the SIGINT callers below never exited in background clean-clone runs (their pytest
    workers had SigIgn 0x7: SIGHUP from nohup, SIGINT, SIGQUIT) and always did from a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def what_it_is_doing(pid: int) -> str:
    """For a caller that did not exit: its signal state, each thread's kernel wait, its Python
    stacks."""
    lines = []
    try:
        with open(f"/proc/{pid}/status") as f:
            lines += [
                l.strip()
                for l in f
                if l.split(":")[0]
                in ("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt", "Threads")
            ]
        for tid in sorted(os.listdir(f"/proc/{pid}/task")):
            with (
                open(f"/proc/{pid}/task/{tid}/wchan") as f,
                open(f"/proc/{pid}/task/{tid}/comm") as g,
            ):
                lines.append(f"thread {tid} {g.read().strip()}: {f.read().strip()}")
    except OSError as e:
        lines.append(f"/proc/{pid}: {e}")
    try:
        dump = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "py-spy"), "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        lines.append(dump.stdout + dump.stderr)
    except (OSError, subprocess.TimeoutExpired) as e:
        lines.append(f"py-spy: {e}")
    return "\n".join(lines)


def start(args: list[str], ready: str, mark: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT, **{MARK: mark})
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_like_a_fresh_process,
    )
    seen = 0
    for line in proc.stdout:  # wait until both ranks really run
        seen += ready in line
        if seen == 2:
            break
    assert seen == 2, "the ranks never started"
    return proc


SLOW = textwrap.dedent("""
    import sys, time
    from lab_utils import run

    def slow(ctx):
        print("started", flush=True)
        time.sleep(300)

    run(slow, 2, timeout_s=400, cold=sys.argv[1] == "cold")
""")


# SIGINT is what "interrupt kernel" and Ctrl-C send; SIGTERM what `kill PID` sends; SIGKILL the OOM
# killer
@pytest.mark.parametrize("how", ["pooled", "cold"])
@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"]
)
def test_ranks_die_with_the_process_that_called_run(how, sig):
    mark = uuid.uuid4().hex
    proc = start([sys.executable, "-c", SLOW, how], "started", mark)
    assert len(marked_pids(mark, proc.pid)) >= 3  # the agent and two ranks
    worker_sigint = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))
    proc.send_signal(sig)
    # how long the caller takes to exit is not the claim (its interpreter teardown took over 10 s at
    # load 7-8 on 2 cores in a clean-clone run); that its ranks are gone 2 s after it is
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        doing = what_it_is_doing(proc.pid)
        proc.kill()
        pytest.fail(
            f"the caller ignored {sig.name} for 60 s; this pytest worker's SIGINT handler and "
            f"blocked signals were {worker_sigint}. The caller:\n{doing}"
        )
    assert gone_within(mark, proc.pid, 2.0) == [], "ranks outlived their caller"


def test_ranks_die_when_the_cli_is_terminated(tmp_path):
    (tmp_path / "slow_target.py").write_text(
        textwrap.dedent("""
        import time
        def slow(ctx):
            print("started", flush=True)
            time.sleep(300)
    """)
    )
    mark = uuid.uuid4().hex
    env_path = f"{tmp_path}{os.pathsep}{ROOT}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lab_utils",
            "run",
            "slow_target:slow",
            "--nproc",
            "2",
            "--timeout",
            "400",
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=env_path, **{MARK: mark}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = 0
    for line in proc.stdout:
        seen += "started" in line
        if seen == 2:
            break
    proc.send_signal(signal.SIGTERM)  # what `kill PID` and coreutils `timeout` send
    proc.wait(timeout=120)  # the caller's exit time is not the claim (see above)
    assert gone_within(mark, proc.pid, 2.0) == []


IDLE = textwrap.dedent("""
    import time
    from lab_utils import run

    def hello(ctx):
        print("started", flush=True)

    run(hello, 2)
    time.sleep(300)          # a kernel between cells: the warm ranks wait for the next run
""")


def test_an_idle_pool_dies_with_its_kernel_and_its_folder_is_cleaned_next_time():
    mark = uuid.uuid4().hex
    proc = start([sys.executable, "-c", IDLE], "started", mark)
    time.sleep(0.5)
    owned = [
        d
        for d in os.listdir(tempfile.gettempdir())
        if d.startswith(TMP_PREFIX) and _owner(os.path.join(tempfile.gettempdir(), d)) == proc.pid
    ]
    assert owned, "the pool keeps a run folder"
    proc.kill()  # no atexit, no cleanup: like a kernel killed by the OOM killer
    proc.wait(timeout=120)
    assert gone_within(mark, proc.pid, 2.0) == []
    clean_stale_run_dirs()  # what the next launch does first
    assert not any(os.path.exists(os.path.join(tempfile.gettempdir(), d)) for d in owned)


def _owner(path: str) -> int | None:
    try:
        with open(os.path.join(path, "owner")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def test_the_suites_own_servers_die_with_pytest(die_with_pytest):
    """The long-lived children the suite starts itself (the browser test's JupyterLab server, each
    nbval run) use conftest's ``die_with_pytest``: SIGKILL a stand-in for pytest (forked from this
    one) and its child, started the same way, is gone within 2 s. Without it a killed pytest left
    a JupyterLab server and its kernel running."""
    mark = uuid.uuid4().hex
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the stand-in for pytest: start the child, report its pid, wait to be killed
        try:
            os.close(read_fd)
            child = subprocess.Popen(
                ["sleep", "60"], env=dict(os.environ, **{MARK: mark}), preexec_fn=die_with_pytest
            )
            os.write(write_fd, str(child.pid).encode())
            os.close(write_fd)
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        child = int(f.read())
    try:
        assert marked_pids(mark, pid) == [child]
    finally:
        os.kill(pid, signal.SIGKILL)  # no finalizer, no atexit: what `kill -9` does to pytest
        os.waitpid(pid, 0)
    assert gone_within(mark, pid, 2.0) == []
