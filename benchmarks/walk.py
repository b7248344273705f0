"""Walk every lab as a learner does, cell by cell, in JupyterLab in Chromium (``make walk``).

    python benchmarks/walk.py                     # every lab
    python benchmarks/walk.py 09 12 --headed      # some labs (a window where a display exists)

Not part of ``make test`` (a whole walk takes far longer than the suite's budget; the audit of
the labs as Run All leaves them, tests/test_notebooks.py, catches most of the same classes). What
it does, per lab: a copy of labs/ in a temporary folder (the learner's files stay untouched),
JupyterLab with the settings ``make lab`` installs, a 1280x800 page; then for each cell in order:
select it, run it (the notebook's run-cell command, as Shift+Enter would), wait for it to finish,
and if it asked for a prediction, commit one (type "1" and press Enter, or pick the first choice
and press Commit), as a learner who never presses Run All; after an exercise's check (the stub),
check its first known-wrong version in a scratch cell, deleted after. Then it saves the notebook
and names:

* in the page: "Error displaying widget", a cut control label, a cell's error output, a wrong
  version not rejected or answered with a traceback;
* noted, not failed: a cell that ran longer than 5 s without a live status line (the runtime
  shows one for runs on ranks; a long single-process cell shows none);
* in the saved notebook: every finding of ``lab_utils.tools.nbaudit`` (a traceback in a grader's
  message, an output twice, a stale box, an axis far beyond its data, LaTeX eating prose) except
  the answer-before-commit rule (here every prediction IS committed, so its tables show).

Writes build/walk/<lab>.json (cells, seconds per cell, findings), a screenshot of the end of each
lab, and prints a table. Exit status 1 when anything was found.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lab_utils.tools.jupyter_server import start_lab  # noqa: E402
from lab_utils.tools.nbaudit import CELL_CHECKS  # noqa: E402
from lab_utils.tools.nbtools import LAB_SETTINGS  # noqa: E402

OUT = ROOT / "build" / "walk"
ACTION_TIMEOUT_MS = 60_000  # a click or a key press (a cell's run has no limit but the walk's own)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
SETTINGS = {
    **LAB_SETTINGS,
    # every cell stays in the DOM (no windowing), so each cell's output can be read
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}

# Runs cell i and watches its outputs meanwhile: did a live status line ("... ranks running")
# show while it ran? Returns [kind, milliseconds, seen].
RUN_CELL = """async i => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    nb.activeCellIndex = i;
    const cell = nb.widgets[i];
    if (cell.model.type !== 'code') return [cell.model.type, 0, false];
    let seen = false;
    const outputs = () => cell.node.querySelector('.jp-OutputArea') || cell.node;
    const watch = new MutationObserver(() => {
        seen = seen || outputs().textContent.includes('ranks running'); });
    watch.observe(cell.node, {subtree: true, childList: true, characterData: true});
    const t0 = performance.now();
    await window.jupyterapp.commands.execute('notebook:run-cell');
    watch.disconnect();
    return ['code', performance.now() - t0, seen];
}"""
PROGRESS_AFTER_S = 5.0  # a cell running longer than this should show progress (issue 37 item 6)
PAGE_PROBLEMS = """i => {
    const cell = window.jupyterapp.shell.currentWidget.content.widgets[i].node, out = [];
    if (cell.textContent.includes('Error displaying widget')) out.push('Error displaying widget');
    for (const e of cell.querySelectorAll('label, button'))
        if (e.offsetParent && e.scrollWidth > e.clientWidth + 1)
            out.push('cut label: ' + e.textContent.trim().slice(0, 60));
    const stderr = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]';
    for (const e of cell.querySelectorAll(stderr))
        if (/Error|Traceback/.test(e.textContent))
            out.push('error output: ' + e.textContent.trim().slice(0, 120));
    return out;
}"""
OPEN = """async name => {
    const sleep = ms => new Promise(r => setTimeout(r, ms));
    let panel = window.jupyterapp.shell.currentWidget;
    while (!panel || !panel.context || !panel.context.path.endsWith(name)) {
        await sleep(100);
        panel = window.jupyterapp.shell.currentWidget;
    }
    await panel.context.ready;
    await panel.sessionContext.ready;
    return panel.content.widgets.length;
}"""


def _die_with_walk() -> None:
    """In the server, between fork and exec: SIGTERM when this script exits (PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def start_jupyter(home: Path) -> tuple[subprocess.Popen, str]:
    """JupyterLab on a copy of labs/, with a token, on a free port; returns (process, base url
    with the token as a query string)."""
    shutil.copytree(
        ROOT / "labs",
        home / "labs",
        ignore=shutil.ignore_patterns("kernel-*", ".ipynb_checkpoints"),
    )
    for plugin, values in SETTINGS.items():
        folder, name = plugin.split(":")
        (home / "settings" / folder).mkdir(parents=True, exist_ok=True)
        (home / "settings" / folder / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
    env = {
        "LAB_QUICK": "0",
        "LAB_PREDICTIONS": str(home / "predictions.json"),
        "LAB_CARDS_PROGRESS": str(home / "cards.json"),
    }
    proc, base, token = start_lab(home, home / "labs", env, _die_with_walk, timeout_s=120)
    return proc, f"{base}|{token}"


def commit_predictions(cell, expected: int) -> list[str]:
    """Commit each of the cell's predictions as a learner would; what was committed. A widget
    renders after its cell finished: wait (30 s at most) until ``expected`` predictions show."""
    shown = cell.locator(".lab-prediction, .lab-prediction-committed")
    deadline = time.time() + 30
    while shown.count() < expected and time.time() < deadline:
        time.sleep(0.2)
    committed = []
    for _ in range(expected):
        open_box = cell.locator(".lab-prediction").first
        if not cell.locator(".lab-prediction").count():
            break
        box = open_box.locator("input[type=text]")
        if box.count():
            box.click()
            box.type("1")
            box.press("Enter")
            committed.append("1")
        else:
            label = open_box.locator(".widget-radio-box label").first  # not the hidden description
            committed.append(label.inner_text())
            label.click()
            open_box.locator("button:text-is('Commit')").click()
        before = len(committed)
        while (
            cell.locator(".lab-prediction-committed").count() < before
            and time.time() < deadline + 30
        ):
            time.sleep(0.2)
    return committed


WRONG_VERSION = """async code => {
    const app = window.jupyterapp, nb = app.shell.currentWidget.content;
    await app.commands.execute('notebook:insert-cell-below');
    nb.activeCell.model.sharedModel.setSource(code);
    await app.commands.execute('notebook:run-cell');
    const text = nb.activeCell.node.querySelector('.jp-OutputArea').textContent;
    await app.commands.execute('notebook:delete-cell');
    return text;
}"""
EXERCISE = re.compile(r"""check\(\s*["'](\w+)["']|\(\s*["'](\w+)["']\s*,\s*(?:my_|My)\w+\s*\)""")


def wrong_version(page, source: str) -> list[str]:
    """After an exercise's check cell: each exercise's first known-wrong version, checked in a
    scratch cell (then deleted) as a learner's first wrong try; what its message gets wrong."""
    found = []
    for name in sorted({a or b for a, b in EXERCISE.findall(source)}):
        code = (
            "from lab_utils.exercises import check as _check, get as _get\n"
            f"_what, _fn = next(iter(_get({name!r}).wrong.items()))\n"
            f"print('a wrong version:', _what)\n_check({name!r}, _fn);"
        )
        text = page.evaluate(WRONG_VERSION, code)
        if "[NOT YET]" not in text:
            found.append(f"{name}: its first wrong version was not rejected: {text[-200:]!r}")
        elif "Traceback" in text or 'File "/' in text:
            found.append(f"{name}: a traceback or file path in the grader's message")
        verdict = next((ln for ln in text.splitlines() if "[NOT YET]" in ln), text.strip()[-110:])
        print(f"    wrong version of {name}: {verdict[:110]!r}", flush=True)
    return found


def walk_lab(context, base_token: str, home: Path, name: str) -> dict:
    base, token = base_token.split("|")
    page = context.new_page()
    page.set_default_timeout(ACTION_TIMEOUT_MS)
    page.goto(f"{base}/lab/workspaces/{uuid.uuid4().hex[:12]}/tree/{name}?token={token}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget")
    n = page.evaluate(OPEN, name)
    sources = [
        c.source if c.cell_type == "code" else ""
        for c in nbformat.read(home / "labs" / name, as_version=4).cells
    ]
    asks = [src.count("predict(") for src in sources]
    cells, found, start = page.locator(".jp-Notebook .jp-Cell"), [], time.perf_counter()
    seconds, silent = [], []  # silent: long cells with no live line (a note, not a finding)
    for i in range(n):
        t0 = time.perf_counter()
        try:
            kind, ms, seen = page.evaluate(RUN_CELL, i)
            if ms > 1e3 * PROGRESS_AFTER_S and not seen:
                silent.append(f"cell {i}: {ms / 1e3:.0f} s without a progress line")
            committed = commit_predictions(cells.nth(i), asks[i]) if asks[i] else []
            if EXERCISE.search(sources[i]):
                found += [f"cell {i}: {p}" for p in wrong_version(page, sources[i])]
        except Exception as exc:  # noqa: BLE001 - a cell that never finishes is a finding too
            found.append(
                f"cell {i}: the walk stopped here: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200]}"
            )
            break
        seconds.append(round(time.perf_counter() - t0, 1))
        found += [f"cell {i}: {p}" for p in page.evaluate(PAGE_PROBLEMS, i)]
        if committed:
            print(f"  {name} cell {i}: committed {committed}", flush=True)
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    OUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(OUT / f"{Path(name).stem}.png"))
    page.close()
    sessions = json.load(urllib.request.urlopen(f"{base}/api/sessions?token={token}"))
    for s in sessions:  # this lab's kernel (and its ranks) end before the next lab starts
        urllib.request.urlopen(
            urllib.request.Request(f"{base}/api/sessions/{s['id']}?token={token}", method="DELETE")
        )
    saved = nbformat.read(home / "labs" / name, as_version=4)
    found += [
        f"cell {i}: {p}"
        for i, c in enumerate(saved.cells)
        for check in CELL_CHECKS
        for p in check(c)
    ]
    report = {
        "lab": name,
        "cells": n,
        "walked": len(seconds),
        "seconds": round(time.perf_counter() - start, 1),
        "seconds_per_cell": seconds,
        "slowest": sorted(enumerate(seconds), key=lambda x: -x[1])[:3],
        "findings": found,
        "silent_long_cells": silent,
    }
    (OUT / f"{Path(name).stem}.json").write_text(json.dumps(report, indent=1))
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labs", nargs="*", help="lab numbers (default: every lab)")
    parser.add_argument("--headed", action="store_true")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    names = sorted(
        p.name
        for p in (ROOT / "labs").glob("[0-9][0-9]_*.ipynb")
        if not args.labs or p.name[:2] in args.labs
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still cleans up (finally)
    home = Path(tempfile.mkdtemp(prefix="lab_walk_"))
    proc, base_token = start_jupyter(home)
    status = 0
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                str(home / "chromium"),
                executable_path=CHROMIUM,
                headless=not args.headed,
                args=FLAGS,
                viewport={"width": 1280, "height": 800},
            )
            for name in names:
                r = walk_lab(context, base_token, home, name)
                status |= bool(r["findings"])
                print(
                    f"{name}: {r['walked']}/{r['cells']} cells in {r['seconds']:.0f} s, "
                    f"slowest {r['slowest']}, {len(r['findings'])} finding(s)",
                    flush=True,
                )
                for f in r["findings"]:
                    print(f"    {f}", flush=True)
                for note in r["silent_long_cells"]:
                    print(f"    note: {note}", flush=True)
            context.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        shutil.rmtree(home, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
