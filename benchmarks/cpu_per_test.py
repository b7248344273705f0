"""A pytest plugin for bench_ci.py: the CPU time each test cost, its own and its children's.

Loaded with ``-p cpu_per_test`` (benchmarks/ on PYTHONPATH); appends one JSON line per test to
$CPU_PER_TEST_OUT: wall seconds, and user+sys CPU seconds of the pytest worker itself and of the
child processes it reaped during the test (kernels, torchrun agents and, through them, their
ranks; the nbval and papermill runs). A pool that outlives a test is counted when it is reaped,
usually at the worker's exit, so a few pooled tests read low; so is the zygote with every agent
forked from it (runtime/engine/zygote.py). What is reaped after the last test (at the worker's
exit) is one more line, id "(worker exit)". On 2 cores the whole suite cannot
take less wall time than its total CPU time / 2: that is the floor that worker packing cannot beat.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import time

import pytest


def _cpu() -> tuple[float, float]:
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def _write(record: dict) -> None:
    out = os.environ.get("CPU_PER_TEST_OUT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")


_last = {"own": 0.0, "children": 0.0, "end": time.monotonic()}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    (own, kids), start = _cpu(), time.monotonic()
    yield
    own2, kids2 = _cpu()
    _last.update(own=own2, children=kids2, end=time.monotonic(), id=item.nodeid)
    _write(
        {
            "id": item.nodeid,
            "wall": time.monotonic() - start,
            "own": own2 - own,
            "children": kids2 - kids,
        }
    )


@atexit.register  # registered before lab_utils is imported, so it runs after its exit handlers
def _worker_exit() -> None:
    if not _last.get("id", "").startswith("tests/"):  # the xdist controller, or an inner nbval run
        return
    own, kids = _cpu()
    _write(
        {
            "id": "(worker exit)",
            "wall": time.monotonic() - _last["end"],
            "own": own - _last["own"],
            "children": kids - _last["children"],
        }
    )
