"""lab_utils: the helper library behind the distributed-training labs.

Notebooks teach; this package computes. Importing it is cheap on purpose: every rank
imports it at start-up, so heavy modules (plotly, ipywidgets) load only in the
sub-packages that need them (``lab_utils.viz``).

Main entry points:
    run(fn, world_size, *args, **kwargs)  launch fn on real ranks (lab 00)
    Ctx                                   what each rank's fn receives
"""
from lab_utils.runtime.launch import RankFailure, RankTimeout, RunResults, run

__all__ = ["run", "Ctx", "RunResults", "RankFailure", "RankTimeout"]


def __getattr__(name: str):
    # Ctx lives with torch (lab_utils.runtime.context); loading it on first use keeps
    # `python -m lab_utils cards` and `doctor --no-smoke` free of the torch import.
    if name == "Ctx":
        from lab_utils.runtime.context import Ctx

        return Ctx
    raise AttributeError(f"module 'lab_utils' has no attribute {name!r}")
