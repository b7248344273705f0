"""Style is enforced by a maintained tool (ruff, configured in pyproject.toml), not by hand."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY_TREES = ["lab_utils", "tests", "benchmarks", "scripts", "labs"]  # labs: the notebooks


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_code_passes_ruff_check():
    out = _ruff("check", "--no-cache", *PY_TREES)
    assert out.returncode == 0, out.stdout + out.stderr


def test_code_is_ruff_formatted():
    out = _ruff("format", "--check", "--no-cache", *PY_TREES)
    assert out.returncode == 0, (
        out.stdout + out.stderr + "\nrun: .venv/bin/python -m ruff format " + " ".join(PY_TREES)
    )


def test_the_notebook_check_rejects_long_cells_and_long_lines():
    import nbformat

    from lab_utils.tools.nbtools import problems

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("x = 1\n" * 26),
        nbformat.v4.new_code_cell("y = " + "1" * 97),
    ]
    found = problems(nb)
    assert "cell 0: 26 lines (at most 25)" in found
    assert "cell 1: line(s) [1] over 100 characters" in found


def test_technique_files_stay_within_budget():
    """parallel/: one technique per file, within the module budget (lab_utils.tools.size)."""
    from lab_utils.tools.size import MAX_LOGICAL_LINES, logical_lines

    for path in sorted((ROOT / "lab_utils" / "parallel").rglob("*.py")):
        n = logical_lines(path)
        assert n <= MAX_LOGICAL_LINES, f"{path.name} says {n} logical lines; split it"
