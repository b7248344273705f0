"""Exercises with hidden reference solutions, checked on real ranks (see ``_core`` for the API).

    from lab_utils.exercises import check, show_solution, list_exercises
    check("ring_all_reduce", my_ring_all_reduce)      # prints PASSED / NOT YET, returns result
    check_ring_all_reduce(my_ring_all_reduce)         # the same, one shortcut per exercise
    show_solution("ring_all_reduce")                  # prints the reference source

Exercise modules in this package are found automatically (pkgutil) the first time an
exercise is looked up, so importing this package stays cheap.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from lab_utils.exercises._core import (
    DISCOVERY_ERRORS,
    CheckResult,
    Exercise,
    Verdict,
    compare_tensors,
    discover,
    get,
    list_exercises,
    register,
    show_solution,
)
from lab_utils.exercises._run import check, check_many
from lab_utils.exercises.predict import Prediction, predict
from lab_utils.exercises.prediction_store import history, history_html

__all__ = [
    "Exercise",
    "Verdict",
    "CheckResult",
    "register",
    "discover",
    "get",
    "check",
    "check_many",
    "show_solution",
    "list_exercises",
    "compare_tensors",
    "DISCOVERY_ERRORS",
    "predict",
    "Prediction",
    "history",
    "history_html",
]


def __getattr__(attr: str) -> Any:
    """``check_<name>(fn)`` for every registered exercise (PEP 562 module attribute)."""
    if attr.startswith("check_") and attr[6:] in discover():
        shortcut = partial(check, attr[6:])
        shortcut.__doc__ = f"check({attr[6:]!r}, fn): {discover()[attr[6:]].summary}"
        return shortcut
    raise AttributeError(f"module 'lab_utils.exercises' has no attribute {attr!r}")


def __dir__() -> list[str]:
    return sorted(__all__ + [f"check_{n}" for n in discover()])
