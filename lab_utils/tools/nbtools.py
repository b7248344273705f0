"""Notebook housekeeping: strip outputs for git, check structure (CONTRIBUTING.md).

    python -m lab_utils.tools.nbtools strip labs/*.ipynb     # remove outputs (keeps checked cells)
    python -m lab_utils.tools.nbtools check labs/*.ipynb     # stripped? parameters cell? exit 1 if
    not
    python -m lab_utils.tools.nbtools lab-settings           # JupyterLab defaults (`make lab`)

A cell whose source contains ``# NBVAL_CHECK_OUTPUT`` keeps its output: nbval compares it.
"""

from __future__ import annotations

import html
import os
import re
import sys
from pathlib import Path
from typing import Any

import nbformat

CHECKED_MARK = "# NBVAL_CHECK_OUTPUT"
REQUIRED_PARAMETERS = ("QUICK", "WORLD_SIZE")
# The kernel `make lab` installs (the Makefile's `ipykernel install --name ... --display-name ...`);
# a notebook naming another one is rewritten by JupyterLab the moment it opens (shown as modified).
KERNELSPEC = {
    "display_name": "Distributed labs (.venv)",
    "language": "python",
    "name": "distributed-labs",
}
# JupyterLab defaults `make lab` installs (the venv's overrides.json). Saved widget state: a saved
# notebook keeps its widgets' last state in its metadata, so reopened on a new kernel the
# flashcards, explorers and prediction inputs render from it; without it every widget output
# reads "Error displaying widget: model not found" once its kernel is gone.
LAB_SETTINGS = {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}


def execute(src: Path, dest: Path, quick: bool) -> None:
    """Run a lab top to bottom with papermill, in quick mode (CI's shortcut, `make site`) or in
    FULL mode (what a learner's Run All does). The kernel sees LAB_QUICK accordingly, so
    predictions use their preset guesses in quick mode only."""
    import papermill  # deferred: strip/check do not need it

    from lab_utils.tools.ipc_kernels import AsyncIPCKernelManager

    previous = os.environ.get("LAB_QUICK")
    os.environ["LAB_QUICK"] = (
        "1" if quick else "0"
    )  # the kernel inherits this process's environment
    try:
        papermill.execute_notebook(
            str(src),
            str(dest),
            parameters={"QUICK": quick},
            kernel_name="python3",
            cwd=str(src.parent),
            progress_bar=False,
            request_save_on_cell_execute=False,  # written once at the end (or on an error)
            kernel_manager_class=AsyncIPCKernelManager,
        )  # no TCP port race
    finally:
        if previous is None:
            del os.environ["LAB_QUICK"]
        else:
            os.environ["LAB_QUICK"] = previous


def execute_quick(src: Path, dest: Path) -> None:
    """Run a lab top to bottom in quick mode (the static site)."""
    execute(src, dest, quick=True)


def strip(nb: nbformat.NotebookNode) -> bool:
    """Remove outputs and execution counts in place; True if anything changed."""
    changed = False
    for cell in nb.cells:
        if cell.cell_type != "code" or CHECKED_MARK in cell.source:
            continue
        if cell.get("outputs") or cell.get("execution_count") is not None:
            cell.outputs, cell.execution_count = [], None
            changed = True
        for key in ("execution", "collapsed", "scrolled"):
            if key in cell.metadata:
                del cell.metadata[key]
                changed = True
    for key in ("widgets", "papermill"):
        if key in nb.metadata:
            del nb.metadata[key]
            changed = True
    if nb.metadata.get("kernelspec") != KERNELSPEC:
        nb.metadata["kernelspec"] = dict(KERNELSPEC)
        changed = True
    return changed


MAX_CELL_LINES, MAX_LINE_CHARS = 25, 100  # a code cell's budget (ruff's line length is the same)


def problems(nb: nbformat.NotebookNode) -> list[str]:
    """What violates the notebook conventions (empty list: fine)."""
    found = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    if len(params) != 1:
        found.append(f"needs exactly one code cell tagged 'parameters', found {len(params)}")
    elif missing := [p for p in REQUIRED_PARAMETERS if p not in params[0].source]:
        found.append(f"parameters cell does not define {', '.join(missing)}")
    unstripped = sum(1 for c in code if c.get("outputs") and CHECKED_MARK not in c.source)
    if unstripped:
        found.append(f"{unstripped} code cell(s) keep outputs: run `make strip`")
    if nb.metadata.get("kernelspec") != KERNELSPEC:
        found.append(
            f"kernelspec must be {KERNELSPEC} (the kernel `make lab` installs): run `make strip`"
        )
    for i, c in enumerate(
        nb.cells
    ):  # both budgets at once: one cannot be met by breaking the other
        lines = c.source.splitlines() if c.cell_type == "code" else []
        if len(lines) > MAX_CELL_LINES:
            found.append(f"cell {i}: {len(lines)} lines (at most {MAX_CELL_LINES})")
        if long := [n for n, line in enumerate(lines, 1) if len(line) > MAX_LINE_CHARS]:
            found.append(f"cell {i}: line(s) {long} over {MAX_LINE_CHARS} characters")
    from lab_utils.tools.giveaways import given_away

    return found + given_away(nb)


def join_text(value: Any) -> str:
    """A notebook's multi-line string field (a list of lines or one string) as one string."""
    return "".join(value) if isinstance(value, list) else str(value)


def outputs_text(output: Any) -> str:
    """The text a learner reads in one output: a stream's text, else its HTML (tags dropped) or
    its plain text."""
    if output.get("output_type") == "stream":
        return join_text(output.get("text", ""))
    data = output.get("data", {})
    if "text/html" in data:
        return html.unescape(re.sub(r"<[^>]+>", " ", join_text(data["text/html"])))
    return join_text(data.get("text/plain", ""))


SERVER_EXTENSIONS = {"lab_utils.tools.jupyter_nodelay": True}


def install_lab_settings(prefix: str = sys.prefix) -> Path:
    """Merge LAB_SETTINGS into ``<prefix>/share/jupyter/lab/settings/overrides.json`` (the
    defaults of every JupyterLab this environment starts; a learner's own settings still win), and
    enable SERVER_EXTENSIONS in ``<prefix>/etc/jupyter/jupyter_server_config.d/``."""
    import json

    path = Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    current = json.loads(path.read_text()) if path.exists() else {}
    for plugin, values in LAB_SETTINGS.items():
        current.setdefault(plugin, {}).update(values)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2) + "\n")
    # and the server extension that sends kernel messages without Nagle's delay
    # (lab_utils/tools/jupyter_nodelay.py), for every `jupyter lab` this environment starts
    server = Path(prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / "lab_utils.json"
    server.parent.mkdir(parents=True, exist_ok=True)
    server.write_text(json.dumps({"ServerApp": {"jpserver_extensions": SERVER_EXTENSIONS}}) + "\n")
    return path


def main(argv: list[str]) -> int:
    if argv == ["lab-settings"]:
        print(f"JupyterLab defaults written to {install_lab_settings()}")
        return 0
    if len(argv) < 2 or argv[0] not in ("strip", "check"):
        print(__doc__)
        return 2
    status = 0
    for path in map(Path, argv[1:]):
        nb = nbformat.read(path, as_version=4)
        if argv[0] == "strip":
            if strip(nb):
                nbformat.write(nb, path)
                print(f"stripped {path}")
        elif found := problems(nb):
            status = 1
            print(f"{path}: " + "; ".join(found))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
