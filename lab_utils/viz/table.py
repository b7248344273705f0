"""One table helper for every lab: rows of results, printed the same way everywhere.

    from lab_utils.viz import show_table
    show_table([{"impl": "ours", "ms/step": 49.6, "bytes": 180480},
                {"impl": "torch DDP", "ms/step": 53.4, "bytes": 180480}],
               title="DDP, 4 ranks", units={"bytes": "B"})

Rows are dicts (columns in first-seen order) or sequences with ``columns=``. In a notebook the
table renders as HTML; anywhere else (and in the notebook's text/plain output, which nbval
and the static site read) it is aligned text. Numbers: ints with thousands separators, floats
with 4 significant digits unless ``fmt={"col": "{:.2f}"}`` says otherwise.
"""

from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

from lab_utils.shown import ShownOnce, in_notebook


def _cell(value: Any, spec: str | None) -> str:
    if spec is not None and value is not None:
        return spec.format(value)
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e15 else f"{value:.3e}"
    return str(value)


class Table(ShownOnce):
    """A rendered table: ``str(t)`` is aligned text, ``t._repr_html_()`` the HTML (shown once:
    a cell ending with ``show_table(...)`` does not show it twice)."""

    def __init__(
        self,
        rows: Sequence[Mapping[str, Any] | Sequence[Any]],
        columns: Sequence[str] | None = None,
        title: str = "",
        fmt: Mapping[str, str] | None = None,
        units: Mapping[str, str] | None = None,
    ):
        fmt = dict(fmt or {})
        if columns is None:
            columns = []
            for row in rows:
                if not isinstance(row, Mapping):
                    raise ValueError("rows that are not dicts need columns=[...]")
                columns += [k for k in row if k not in columns]
        self.columns = list(columns)
        dict_rows = [
            row if isinstance(row, Mapping) else dict(zip(self.columns, row)) for row in rows
        ]
        self.header = [f"{c} ({units[c]})" if units and c in units else c for c in self.columns]
        self.cells = [[_cell(r.get(c), fmt.get(c)) for c in self.columns] for r in dict_rows]
        self.numeric = [
            all(isinstance(r.get(c), (int, float)) or r.get(c) is None for r in dict_rows)
            for c in self.columns
        ]
        self.title = title

    def __str__(self) -> str:
        widths = [
            max([len(h)] + [len(row[i]) for row in self.cells]) for i, h in enumerate(self.header)
        ]

        def line(values: list[str]) -> str:
            return "  ".join(
                v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, self.numeric)
            ).rstrip()

        out = [self.title] if self.title else []
        out += [line(self.header), "  ".join("-" * w for w in widths)]
        out += [line(row) for row in self.cells]
        return "\n".join(out)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        align = ["right" if num else "left" for num in self.numeric]
        head = "".join(
            f"<th style='text-align:{a};padding:2px 10px'>{html.escape(h)}</th>"
            for h, a in zip(self.header, align)
        )
        body = "".join(
            "<tr>"
            + "".join(
                f"<td style='text-align:{a};padding:2px 10px'>{html.escape(v)}</td>"
                for v, a in zip(row, align)
            )
            + "</tr>"
            for row in self.cells
        )
        title = (
            f"<div style='font-weight:600;margin:4px 0'>{html.escape(self.title)}</div>"
            if self.title
            else ""
        )
        return f"{title}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def show_table(
    rows: Sequence[Mapping[str, Any] | Sequence[Any]],
    columns: Sequence[str] | None = None,
    title: str = "",
    fmt: Mapping[str, str] | None = None,
    units: Mapping[str, str] | None = None,
) -> Table:
    """Display a table of results (HTML in Jupyter, text elsewhere); returns the Table."""
    table = Table(rows, columns, title, fmt, units)
    if in_notebook():
        table.show()
    else:
        print(table)
    return table
