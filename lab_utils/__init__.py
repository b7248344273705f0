"""lab_utils: the helper library behind the distributed-training labs.

Notebooks teach; this package computes. Importing it is cheap on purpose: every rank
imports it at start-up, so heavy modules (plotly, ipywidgets) load only in the
sub-packages that need them (``lab_utils.viz``).

Main entry points:
    run(fn, world_size, *args, **kwargs)  launch fn on real ranks (lab 00); warm ranks are reused
    ranks(world_size)                     start (or get) the warm pool of ranks: .shutdown()
    Ctx                                   what each rank's fn receives
    %load_ext lab_utils                   the %%ranks cell magic (a cell on every rank)
"""

from lab_utils.runtime.launch import RankFailure, RankTimeout, RunResults, ranks, run

__all__ = ["run", "ranks", "Ctx", "RunResults", "RankFailure", "RankTimeout"]


def __getattr__(name: str):
    # Ctx lives with torch (lab_utils.runtime.context); loading it on first use keeps
    # `python -m lab_utils cards` and `doctor --no-smoke` free of the torch import.
    if name == "Ctx":
        from lab_utils.runtime.context import Ctx

        return Ctx
    raise AttributeError(f"module 'lab_utils' has no attribute {name!r}")


def load_ipython_extension(ipython) -> None:
    """``%load_ext lab_utils``: registers ``%%ranks`` and ``%ranks_pull``."""
    from lab_utils.runtime.magic import load_ipython_extension as load

    load(ipython)
