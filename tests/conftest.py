"""Shared test settings and the one way tests run code on ranks.

* One intra-op thread in the test process: tests launch ranks that compete for the same cores,
  and torch's spinning OpenMP threads in the parent then slow everything down (40x measured on
  2 oversubscribed cores). The models here are tiny; one thread loses nothing.
* Test modules travel to the ranks BY VALUE (cloudpickle): ``tests/`` is not importable there,
  so a rank worker defined in a test file is pickled with its code. Registered here for every
  collected test module, once.
* ``on_ranks(fn, world_size, *args, **kw)`` (a fixture): ``lab_utils.run`` that turns a rank's
  failed ``assert`` back into an AssertionError in pytest, with the rank's ORIGINAL message and
  traceback, so an assertion can sit on the rank, next to what it checks.
* One shared zygote (runtime/engine/zygote.py) for the whole run, started before the xdist workers:
  every launcher under this pytest (workers, the notebooks' kernels, the scripts tests start) forks
  its
  torchrun agents from it instead of importing torch into a zygote of its own (46 per run, ~3.3
  CPU-s
  each). Tests about a launcher's own zygote, or that find ranks by their start-up environment, use
  the ``own_zygote`` fixture.
* ``die_with_pytest`` (a fixture): a ``preexec_fn`` for a long-lived child a test starts (a
  JupyterLab server, an nbval run): the child gets SIGTERM when pytest exits, however it exits.
  A SIGTERM or SIGKILL to pytest runs no fixture finalizer, and such a child outlived it.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
from typing import Any, Callable

import cloudpickle
import pytest
import torch

from lab_utils import RankFailure, run
from lab_utils.runtime.engine import zygote

torch.set_num_threads(1)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and zygote.enabled() and zygote.SHARED not in os.environ:
        os.environ[zygote.SHARED] = zygote.start_shared()[
            1
        ]  # inherited by the workers and all they start


@pytest.fixture
def own_zygote(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's launches (and its subprocesses') use a zygote of their own, as outside the suite:
    an agent forked from the shared zygote shows the shared zygote's start-up environment in
    /proc/PID/environ, not this process's."""
    monkeypatch.delenv(zygote.SHARED, raising=False)


# The longest items (each notebook executed top to bottom) go FIRST, so that pytest-xdist's
# workers start them while the short tests fill the gaps; collected last, as they were, they
# formed a long tail on one or two workers at the end of the run.
_LONG_FIRST = ("test_full_mode_runs[", "test_quick_mode_runs_under_nbval[")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for module in {item.module for item in items if getattr(item, "module", None) is not None}:
        cloudpickle.register_pickle_by_value(module)

    def rank(item: pytest.Item) -> int:
        return next(
            (i for i, mark in enumerate(_LONG_FIRST) if mark in item.nodeid), len(_LONG_FIRST)
        )

    items.sort(key=rank)  # stable: every other test keeps its order (module fixtures stay grouped)


def run_on_ranks(fn: Callable, world_size: int, *args: Any, **kwargs: Any):
    """``run(fn, world_size, ...)`` (quiet); a rank's AssertionError is re-raised as one."""
    kwargs.setdefault("quiet", True)
    try:
        return run(fn, world_size, *args, **kwargs)
    except RankFailure as exc:
        for rank in exc.ranks:  # the first rank that failed an assert (others may be symptoms)
            tb = exc.tracebacks[rank]
            # the exception line, then pytest's explanation of the assert (assertion rewriting)
            found = re.findall(r"^AssertionError(?::\s*(.*))?$", tb, flags=re.M)
            if found:
                message = found[-1] or "assert failed"
                raise AssertionError(
                    f"on rank {rank}: {message}\n\nthe rank's traceback:\n{tb}"
                ) from None
        raise


@pytest.fixture(scope="session")
def on_ranks() -> Callable:
    return run_on_ranks


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _sigterm_when_parent_exits() -> None:
    """Runs in the child between fork and exec. The signal follows the parent THREAD that forked
    it; here that is pytest's main thread (xdist runs tests there too), which lives as long as
    pytest."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@pytest.fixture(scope="session")
def die_with_pytest() -> Callable[[], None]:
    return _sigterm_when_parent_exits
