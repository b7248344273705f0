"""``python -m lab_utils twin validate``: the emulator checked against calc and published runs.

(a) each grid workload (``grid.py``) runs for real on 4 emulated GPUs (2 DGX H100 nodes x 2;
    the 3D layout on 8: 2 nodes x 4) and its emulated step time must be within 5% of calc's
    analytic time for the same step;
(b) published training throughputs (``published.py``) must be predicted within 15% with ONE
    compute efficiency per GPU (the preset's), never tuned per row.
A row out of its bound is a MISS and the command exits 1. Every time is labelled: "emulated"
(the virtual clock of a real run), "calc" (a formula), "published" (a paper's measurement).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

GRID_BOUND, PUBLISHED_BOUND = 0.05, 0.15


@dataclass(frozen=True)
class Row:
    part: str
    name: str
    ours: float
    reference: float
    unit: str
    bound: float
    how: str

    @property
    def error(self) -> float:
        return self.ours / self.reference - 1

    @property
    def ok(self) -> bool:
        return abs(self.error) <= self.bound


def grid_rows(timeout_s: float = 300.0) -> list[Row]:
    """Part (a): run the grid on the emulated cluster (4 ranks, then 8 for the 3D layout)."""
    from lab_utils.twin import grid
    from lab_utils.twin.emulate import emulate

    rows = []
    for fn, c, analytic in (
        (grid.run_grid, grid.grid_cluster(), grid.analytic),
        (grid.step_3d, grid.cluster_3d(), grid.analytic_3d),
    ):
        em = emulate(fn, c.world_size, c, scale=grid.GRID_SCALE, quiet=True, timeout_s=timeout_s)
        if em.unknown:
            raise RuntimeError(f"the grid made calls the emulator does not model: {em.unknown}")
        ref = analytic(c)
        rows += [
            Row(
                "a",
                name,
                max(r[name] for r in em.results) * 1e3,
                ref[name][0] * 1e3,
                "ms",
                GRID_BOUND,
                ref[name][1],
            )
            for name in em.results[0]
        ]
    return rows


def published_table() -> list[Row]:
    """Part (b): the published rows (analytic extrapolations, labelled)."""
    from lab_utils.twin.published import published_rows

    return [
        Row(
            "b",
            p.name,
            p.predicted,
            p.published,
            "TFLOP/s/GPU",
            PUBLISHED_BOUND,
            f"{p.how}; {p.source}",
        )
        for p in published_rows()
    ]


def format_table(rows: Sequence[Row]) -> str:
    head = (
        f"{'':2}{'row':52} {'ours':>10} {'reference':>10} {'unit':>12} {'error':>7} "
        f"{'bound':>6}  ok    how / source"
    )
    lines = [head, "-" * len(head)]
    titles = {
        "a": "(a) emulated step (real run, virtual clock) vs calc's analytic time",
        "b": "(b) published measurement vs our prediction",
    }
    part = None
    for r in rows:
        if r.part != part:
            part = r.part
            lines.append(titles[part])
        lines.append(
            f"  {r.name:52} {r.ours:10.3f} {r.reference:10.3f} {r.unit:>12} "
            f"{100 * r.error:+6.1f}% {100 * r.bound:5.0f}%  "
            f"{'yes ' if r.ok else 'MISS'}  {r.how}"
        )
    return "\n".join(lines)


def validate(grid: bool = True) -> tuple[list[Row], str]:
    """All rows and the printed table (``grid=False`` skips the emulated runs)."""
    from lab_utils.calc.hardware import CLUSTER_SPECS

    rows = (grid_rows() if grid else []) + published_table()
    effs = sorted({f"{s.device} {s.compute_efficiency:g}" for s in CLUSTER_SPECS.values()})
    note = (
        "compute efficiency (one per GPU, never per row): "
        + ", ".join(effs)
        + "\nreference: calc's formula in (a), the paper's measurement in (b)"
    )
    return rows, format_table(rows) + "\n" + note


def main(argv: Sequence[str] = ()) -> int:
    rows, table = validate(grid="--no-grid" not in argv)
    print(table)
    misses = [r.name for r in rows if not r.ok]
    print(
        f"{len(rows) - len(misses)}/{len(rows)} rows within their bound"
        + (f"; MISS: {', '.join(misses)}" if misses else "")
    )
    return 1 if misses else 0
