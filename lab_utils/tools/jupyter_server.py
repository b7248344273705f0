"""A private JupyterLab server for a browser test or the learner walk (``make walk``): its own
home (runtime, config, settings, workspaces), a token, a free port, the labs' kernel.

Used by tests/test_browser.py and benchmarks/walk.py, so the two drive the same server.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Callable


def free_port() -> int:
    """A TCP port nobody listens on right now (127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(
    home: Path,
    root_dir: Path,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    timeout_s: float = 60.0,
) -> tuple[subprocess.Popen, str, str]:
    """JupyterLab serving ``root_dir``, its state under ``home``; returns (process, base url,
    token) once it answers /api/status. ``env`` adds variables (LAB_QUICK, ...); the log is
    home/jupyter.log, whose tail the error shows if the server does not come up in time."""
    port, token = free_port(), uuid.uuid4().hex
    full_env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        **(env or {}),
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root_dir}",
            "--LabApp.expose_app_in_browser=True",
            "--ServerApp.port_retries=0",
            *(["--allow-root"] if os.geteuid() == 0 else []),  # CI containers run as root
        ],
        env=full_env,
        stdout=open(home / "jupyter.log", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            return proc, base, token
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                tail = (home / "jupyter.log").read_text()[-3000:]
                raise RuntimeError(
                    f"JupyterLab did not start within {timeout_s:g} s; its log ends with:\n{tail}"
                ) from None
            time.sleep(0.5)
