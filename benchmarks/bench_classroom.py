"""Classroom mode under a room's burst: 200 learners commit one prediction each within 1 s.

Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_classroom.py [--learners 200] [--window 1]

The server is the real one (`python -m lab_utils class serve`, a child process, a fresh SQLite
file). Every learner joins first (not timed); then the commits go out spread evenly over the
window, one thread per learner (real HTTP clients). Goals: every commit stored, and the instructor
page updated <= 1 s after the last commit answered. "Updated" is measured twice: when the page's
event stream (what the page reads) delivers a room with every guess, and, when Chromium is
installed, when the page's DOM shows every guess committed (Playwright waits for it).
The server's CPU time (utime + stime from /proc, over the burst and the update) and its memory
(resident now and at peak, VmRSS / VmHWM) are reported. A loaded machine inflates the times.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from lab_utils.classroom.client import post

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 1.0
KEY = "05.zero2_bytes"


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    return {k: int(re.search(rf"{k}:\s+(\d+)", status).group(1)) / 1024 for k in ("VmRSS", "VmHWM")}


def watch_stream(url: str, learners: int, seen: dict) -> None:
    """Read the page's event stream; note when a room with every guess arrives."""
    with urllib.request.urlopen(url, timeout=60) as stream:
        for line in stream:
            if line.startswith(b"data: "):
                room = json.loads(line[6:])
                q = [q for q in room["questions"] if q["key"] == KEY]
                if q and len(q[0]["guesses"]) == learners:
                    seen["stream"] = time.monotonic()
                    return


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--learners", type=int, default=200)
    ap.add_argument("--window", type=float, default=1.0, help="seconds the commits spread over")
    ns = ap.parse_args()
    db = Path(tempfile.mkdtemp(prefix="bench_classroom_")) / "class.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lab_utils", "class", "serve", "--db", str(db), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        printed = "".join(proc.stdout.readline() for _ in range(4))
        url = re.search(r"class server on (http://\S+)", printed).group(1)
        code = re.search(r"join code: (\w+)", printed).group(1)
        page = re.search(r"(http://\S+/instructor\?\S+)", printed).group(1)
        names = [f"learner-{i:03d}" for i in range(ns.learners)]
        for name in names:
            post(url, code, "/api/join", {"pseudonym": name})
        seen: dict = {}
        stream = threading.Thread(
            target=watch_stream,
            args=(page.replace("/instructor", "/api/events"), ns.learners, seen),
            daemon=True,
        )
        stream.start()
        answered: list[float] = []
        with instructor_page(page) as browser:
            cpu0, start = cpu_s(proc.pid), time.monotonic() + 0.2

            def commit(i: int) -> None:
                time.sleep(max(0.0, start + i * ns.window / ns.learners - time.monotonic()))
                post(
                    url,
                    code,
                    "/api/prediction",
                    {
                        "pseudonym": names[i],
                        "key": KEY,
                        "question": "Bytes per step?",
                        "guess": 2.0**i,
                    },
                )
                answered.append(time.monotonic())

            threads = [threading.Thread(target=commit, args=(i,)) for i in range(ns.learners)]
            for t in threads:
                t.start()
            browser_s = None
            if browser is not None:
                browser.wait_for_selector(
                    f'[data-key="{KEY}"][data-committed="{ns.learners}"]', timeout=60_000
                )
                browser_s = time.monotonic()
            for t in threads:
                t.join()
        stream.join(timeout=10)
        cpu = cpu_s(proc.pid) - cpu0
        mem = memory_mib(proc.pid)
        room = json.loads(urllib.request.urlopen(page.replace("/instructor", "/api/state")).read())
        stored = len(next(q for q in room["questions"] if q["key"] == KEY)["guesses"])
        last = max(answered)
        print(
            f"{ns.learners} learners, commits spread over {ns.window:g} s: first to last "
            f"answered in {last - start:.2f} s (measured, wall)"
        )
        print(f"stored: {stored} of {ns.learners}  {'OK' if stored == ns.learners else 'LOST'}")
        lag = seen.get("stream", float("inf")) - last
        print(
            f"event stream had every guess {lag * 1e3:.0f} ms after the last commit answered "
            f"(goal <= {GOAL_S * 1e3:.0f} ms) {'OK' if lag <= GOAL_S else 'SLOW'}"
        )
        if browser_s is not None:
            lag = browser_s - last
            print(
                f"Chromium's page showed every guess {lag * 1e3:.0f} ms after the last commit "
                f"answered (goal <= {GOAL_S * 1e3:.0f} ms) {'OK' if lag <= GOAL_S else 'SLOW'}"
            )
        print(
            f"server CPU over the burst and the update: {cpu:.2f} s; memory: resident "
            f"{mem['VmRSS']:.0f} MiB, peak {mem['VmHWM']:.0f} MiB"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def instructor_page(page_url: str):
    """Chromium with the instructor page open and live (its stream connected), or None."""
    chromium = "/usr/bin/chromium"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        yield None
        return
    if not os.path.exists(chromium):
        yield None
        return
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page()
            page.goto(page_url)
            page.wait_for_selector("#status.live", timeout=60_000)
            yield page
        finally:
            browser.close()


if __name__ == "__main__":
    main()
