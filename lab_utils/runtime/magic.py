"""``%%ranks``: run a notebook cell on every rank of the warm pool (labs 00, 03).

    %load_ext lab_utils
    %%ranks -n 4
    x = torch.full((2,), float(ctx.rank))      # ctx, dist and torch are predefined
    print("before", x)
    dist.all_reduce(x)
    print("after", x)

    %ranks_pull x                               # -> [tensor(...), ...] one per rank, into `x`

Each rank keeps its own variables from one ``%%ranks`` cell to the next: an interactive
distributed session. Output streams back live, prefixed ``[rank k]``. Errors are those of
``run()``: a rank that raises is named with its original traceback, a hang ends at the
timeout with every stuck rank's line; either way the pool is torn down, so the next cell starts
fresh ranks (and says that the session's variables are gone).
"""

from __future__ import annotations

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from lab_utils.runtime.engine import pool as pools
from lab_utils.runtime.launch import ranks


@magics_class
class RankMagics(Magics):
    """The ``%%ranks`` cell magic and the ``%ranks_pull`` line magic."""

    _session: int | None = None  # id of the pool whose namespaces hold this notebook's variables

    @magic_arguments()
    @argument(
        "-n",
        "--nproc",
        type=int,
        default=None,
        help="number of ranks (default: the running pool's, else 4)",
    )
    @argument("--backend", default="auto", help="auto, gloo or nccl")
    @argument("--timeout", type=float, default=120.0, help="seconds before stuck ranks are stopped")
    @cell_magic
    def ranks(self, line: str, cell: str) -> None:
        """Run this cell on every rank; variables persist per rank between %%ranks cells."""
        args = parse_argstring(self.ranks, line)
        running = pools.current()
        n = args.nproc or (running.world_size if running is not None else 4)
        if n < 1:
            raise ValueError(f"-n must be at least 1, got {n}")
        pool = ranks(n, args.backend)
        if self._session is not None and id(pool) != self._session:
            print(
                f"[lab_utils] started {n} fresh ranks: variables of earlier %%ranks cells are gone",
                flush=True,
            )
        self._session = id(pool)
        pool.execute(cell, timeout_s=args.timeout)

    @line_magic
    def ranks_pull(self, line: str) -> list:
        """``%ranks_pull x``: every rank's ``x``, as a list indexed by rank, stored as ``x``."""
        name = line.strip()
        if not name.isidentifier():
            raise ValueError(
                f"usage: %ranks_pull NAME (a variable of the %%ranks cells), got {line!r}"
            )
        pool = pools.current()
        if pool is None or id(pool) != self._session:
            raise RuntimeError("no %%ranks session is running: run a %%ranks cell first")
        values = pool.pull(name)
        self.shell.user_ns[name] = values
        return values


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(RankMagics)
