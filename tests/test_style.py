"""Style is enforced by a maintained tool (ruff, configured in pyproject.toml), not by hand."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY_TREES = ["lab_utils", "tests", "benchmarks", "scripts"]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_python_files_pass_ruff_check():
    out = _ruff("check", "--no-cache", *PY_TREES)
    assert out.returncode == 0, out.stdout + out.stderr


def test_python_files_are_ruff_formatted():
    out = _ruff("format", "--check", "--no-cache", *PY_TREES)
    assert out.returncode == 0, (
        out.stdout + out.stderr + "\nrun: .venv/bin/python -m ruff format " + " ".join(PY_TREES)
    )
