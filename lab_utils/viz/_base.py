"""The shape every explorer widget shares: controls -> validate -> pure figure spec -> view.

An explorer is an ``ipywidgets.VBox`` (so it displays and nests like any widget) made of:

    title    an HTML header with a stable text and CSS class (found by headless-browser tests)
    controls ipywidgets whose ``.value`` IS the widget's state (the whole contract)
    error    an HTML box: the readable message of the last bad input, empty when all is well
    summary  HTML with the numbers the figure shows, stated in words (below the figure)
    figure   a plotly ``go.Figure`` of the shown state (what tests and code read), brought up to
             date when read: the page draws from the spec's JSON, so no update waits for it
    view     an ``ipywidgets.Output`` showing that figure through plotly's JupyterLab mime
             renderer (``application/vnd.plotly.v1+json``), replaced as one synced state
    plot     a ``LivePlot``: once the page has drawn ``view``, it redraws that same graph in place

Subclasses provide three PURE functions (no widgets, callable in tests):
``validate(values) -> state`` (raises ValueError with a readable message),
``figure_spec(state) -> {"data": [trace dicts], "layout": {...}}`` and
``summary_html(state) -> str``. A bad input shows its message in ``error`` and leaves the
figure at its last valid state; it never raises out of a callback.

Why not plotly's ``FigureWidget``: it is an anywidget whose 5 MB JavaScript module must load
within anywidget's 2-second initialisation window; on a slow or busy machine it does not, and
from then on the frontend drops EVERY message to that figure, so the plot stays blank and never
follows the controls (reproduced in headless Chromium with 20x CPU throttling, and seen once in
CI). A core ``Output`` widget has no such window: its state always arrives. Why ``LivePlot`` as
well, and when it takes over: lab_utils/viz/live_plot.py.
"""

from __future__ import annotations

import functools
import html
import json
from typing import Any

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from traitlets import TraitError

from lab_utils.viz.axis_check import checked
from lab_utils.viz.controls import NumberText
from lab_utils.viz.live_plot import (
    MAX_RENEWALS,
    LivePlot,
    Spec,
    default_template,
    figure_json,
    figure_output,
)

ERROR_STYLE = (
    "color:#8a1c1c;background:#fdecea;border:1px solid #f5c2c7;border-radius:4px;"
    "padding:6px 10px;margin:4px 0;font-size:13px"
)


def error_html(message: str) -> str:
    """The error box: the message, escaped, and a note that the figure did not change."""
    return (
        f'<div class="lab-widget-error" style="{ERROR_STYLE}"><b>Cannot update:</b> '
        f"{html.escape(message)}<br><i>The figure still shows the last valid input.</i>"
        "</div>"
    )


def apply_spec(fig: go.Figure, spec: Spec, previous: Spec | None = None) -> None:
    """Push a figure spec into a figure kept between updates.

    Same trace count and types as ``previous`` (the spec applied last): assign only the
    top-level properties whose value changed, inside one batch. Each plotly assignment is
    validated (~0.5 ms for a nested dict), so re-sending unchanged styling would cost most of
    an update. Otherwise replace the traces. Builders emit the same keys for a slot, so no
    stale property survives.
    """
    data = [dict(d) for d in spec["data"]]
    types = [d.pop("type", "scatter") for d in data]
    layout = spec.get("layout", {})
    same = (
        previous is not None
        and len(fig.data) == len(data)
        and all(t.type == ty for t, ty in zip(fig.data, types))
    )
    if same:
        assert previous is not None
        old_layout = previous.get("layout", {})
        with fig.batch_update():
            for trace, props, old in zip(fig.data, data, previous["data"]):
                changed = {k: _array(k, v) for k, v in props.items() if old.get(k) != v}
                if changed:
                    trace.update(**changed)
            changed = {k: v for k, v in layout.items() if old_layout.get(k) != v}
            if changed:
                fig.layout.update(changed)
        return
    with fig.batch_update():
        fig.data = []
    fig.add_traces(
        [dict({k: _array(k, v) for k, v in d.items()}, type=ty) for d, ty in zip(data, types)]
    )
    with fig.batch_update():
        fig.layout.update(layout)


_ARRAYS = ("x", "y", "base", "text", "hovertext")


def _array(key: str, value: Any) -> Any:
    """Long data lists as numpy arrays: plotly validates a list element by element (~10 us
    each) but copies an array in one go, and the widget ships numeric arrays as binary."""
    if key in _ARRAYS and isinstance(value, list) and len(value) > 16:
        return np.asarray(value)
    return value


def to_figure(spec: Spec) -> go.Figure:
    """A static ``go.Figure`` from a spec (for papermill / static HTML export)."""
    return checked(go.Figure(spec))


@functools.cache
def template_json() -> str:
    """The default template as the text every LivePlot sends its page once (live_plot.py)."""
    return json.dumps(default_template(), separators=(",", ":"))


COLUMN_CHARS = 28  # characters a grid column shows whole at 1280 px (about 200 px of 13-px text)


def grid_span(ctl: widgets.Widget, columns: int) -> int:
    """Grid columns a control needs for its label and its longest option, at most ``columns``."""
    chars = len(getattr(ctl, "description", ""))
    if isinstance(ctl, widgets.Dropdown):
        chars += 8 + max((len(str(label)) for label in ctl._options_labels), default=0)
    elif isinstance(ctl, widgets.Text):
        chars += 8  # room to show a number
    elif isinstance(ctl, widgets.Checkbox):
        chars += 3  # the box
    return min(columns, 1 + (chars - 1) // COLUMN_CHARS)


class Explorer(widgets.VBox):
    """Base class; see the module docstring. ``set(**values)`` drives it from code."""

    TITLE = "Explorer"
    CSS = "lab-explorer"
    COLUMNS = 4

    def __init__(self, controls: dict[str, widgets.ValueWidget], **initial: Any) -> None:
        self.controls = controls
        self.header = widgets.HTML(
            f'<h3 class="lab-widget-title" style="margin:4px 0">{html.escape(self.TITLE)}</h3>'
        )
        self.error = widgets.HTML("")
        self.summary = widgets.HTML("")
        self._figure, self._figure_spec = go.Figure(), None  # see the ``figure`` property
        self.view = widgets.Output(layout=widgets.Layout(width="100%"))
        self.plot, self.plot_renewals = self._new_plot(), 0
        self.state: Any = None  # the last VALID state (what the figure shows)
        self.spec: Spec | None = None  # the figure spec of that state (plain dicts)
        self._holding = False
        self._set_errors: list[str] = []
        self._message = ""
        for ctl in controls.values():
            # fill the grid cell, its margins included (width 100% plus margins stuck out 2 px,
            # clipped); a long label or option takes as many columns as it needs to show whole
            ctl.layout.width = "auto"
            # (grid_area: ipywidgets 8.1's front end drops grid_column, measured in Chromium)
            ctl.layout.grid_area = f"auto / span {grid_span(ctl, self.COLUMNS)}"
            ctl.style.description_width = "initial"
            ctl.observe(self._on_change, names="value")
        grid = widgets.GridBox(
            list(controls.values()),
            # minmax(0, 1fr): equal columns that may shrink below their content (a long
            # dropdown label), so the grid fits a 1280-px-wide notebook instead of overflowing
            layout=widgets.Layout(
                grid_template_columns=f"repeat({self.COLUMNS}, minmax(0, 1fr))",
                grid_gap="4px 12px",
                width="100%",
                grid_auto_flow="row dense",
            ),
        )
        # the numbers in words go BELOW the figure: controls and figure fit one screen (1280x800)
        super().__init__([self.header, grid, self.error, self.view, self.plot, self.summary])
        self.add_class("lab-explorer")
        self.add_class(self.CSS)
        if initial:
            self.set(**initial)
        else:
            self.update()

    def __repr__(self) -> str:
        # Short text/plain (stored in executed notebooks) instead of the whole widget tree.
        shown = ", ".join(f"{k}={v!r}" for k, v in self.values.items())
        return f"<{type(self).__name__}: {shown}{' | ' + self._message if self._message else ''}>"

    # --- the pure part, overridden by each explorer -------------------------------------
    @staticmethod
    def validate(values: dict[str, Any]) -> Any:
        raise NotImplementedError

    @staticmethod
    def figure_spec(state: Any) -> Spec:
        raise NotImplementedError

    @staticmethod
    def summary_html(state: Any) -> str:
        return ""

    # --- the view ------------------------------------------------------------------------
    @property
    def figure(self) -> go.Figure:
        """The plotly figure of the last valid state (updated from its spec when read)."""
        if self.spec is not None and self._figure_spec is not self.spec:
            apply_spec(self._figure, self.spec, self._figure_spec)
            self._figure_spec = self.spec
        return self._figure

    @property
    def values(self) -> dict[str, Any]:
        """The synced state: every control's current value, by name. A number box gives
        what its text parses to (``calc._check.parse_number``): 4, 2.5, or the text itself
        when it is not a number, so ``validate`` reports it with the calculators' checks."""
        return {
            name: ctl.number if isinstance(ctl, NumberText) else ctl.value
            for name, ctl in self.controls.items()
        }

    @property
    def error_message(self) -> str:
        """The readable message shown for the current input, "" when it is valid."""
        return self._message

    def set(self, **values: Any) -> "Explorer":
        """Set several controls at once (one update at the end); returns self.

        A value a control cannot hold (e.g. an unknown preset) is reported in the error box.
        """
        unknown = [k for k in values if k not in self.controls]
        if unknown:
            raise ValueError(f"unknown control(s) {unknown}; this widget has {list(self.controls)}")
        self._holding, self._set_errors = True, []
        try:
            for name, value in values.items():
                ctl = self.controls[name]
                if (
                    isinstance(ctl, NumberText)
                    and ctl.whole
                    and isinstance(value, float)
                    and not value.is_integer()
                ):  # keep the box's last whole number
                    self._set_errors.append(f"{name} must be a whole number, got {value!r}")
                    continue
                try:
                    ctl.value = value
                except (TraitError, ValueError, TypeError) as exc:
                    self._set_errors.append(self._trait_message(name, value, exc))
        finally:
            self._holding = False
        self.update()
        return self

    def _trait_message(self, name: str, value: Any, exc: Exception) -> str:
        ctl = self.controls[name]
        if isinstance(ctl, NumberText):
            return f"{name} must be a number, got {value!r}"
        opts = getattr(ctl, "options", None)
        if opts is not None:
            keys = [o[1] if isinstance(o, tuple) else o for o in opts]
            return f"{name} must be one of {', '.join(map(repr, keys))}; got {value!r}"
        return (
            f"{name} cannot be {value!r}: {type(ctl).__name__} holds a {type(ctl.value).__name__}"
        )

    def _on_change(self, change: dict[str, Any]) -> None:
        self.on_control_change(change)
        if not self._holding:
            self._set_errors = []  # a new edit replaces what a failed set() reported
            self.update()

    def on_control_change(self, change: dict[str, Any]) -> None:
        """Hook for coupled controls (e.g. picking a device fills its memory)."""

    def hold(self) -> "_Hold":
        """``with w.hold(): ...`` changes several controls with ONE update at the end."""
        return _Hold(self)

    def update(self) -> bool:
        """Validate the controls and redraw. Returns False (and shows why) on bad input."""
        if self._set_errors:  # a value no control could hold: report it before anything else
            return self._fail("; ".join(self._set_errors))
        try:
            state = self.validate(self.values)
            spec = checked(self.figure_spec(state))  # no axis far beyond its data
            summary = self.summary_html(state)
        except ValueError as exc:
            return self._fail(str(exc))
        except Exception as exc:  # a calculator bug must not print a traceback in class
            return self._fail(f"unexpected {type(exc).__name__}: {exc}")
        self.spec = spec
        # a live view redraws from this text; otherwise the Output shows it
        self.plot.figure = figure_json(spec, template=False) or pio.to_json(
            self.figure, validate=False
        )
        if not self.plot.live:
            self._show_in_output()
        self.summary.value = summary
        self.state, self._message, self.error.value = state, "", ""
        return True

    def _show_in_output(self) -> None:
        # the new output replaces the old one: keep its height so the page does not jump
        layout = self.spec.get("layout", {}) if self.spec else {}
        title = layout.get("title")
        title = (title.get("text") if isinstance(title, dict) else title) or "figure"
        self.view.layout.min_height = f"{layout.get('height') or 360}px"
        self.view.outputs = (figure_output(self.plot.full(), title),)

    def _on_live(self, change: dict[str, Any]) -> None:
        if not change["new"]:  # a view could not redraw in place: the Output shows the figure
            self._show_in_output()

    def _new_plot(self) -> LivePlot:
        plot = LivePlot(layout=widgets.Layout(height="0px"), template=template_json())
        plot.observe(self._on_live, names="live")
        plot.observe(self._on_deaf, names="deaf")
        return plot

    def _on_deaf(self, change: dict[str, Any]) -> None:
        """The page drops every message to this LivePlot (anywidget gave up on it: live_plot.py), so
        it can never go live. A fresh model gets a fresh 2-second window, on a page that is by now
        less busy; its figure is set AFTER it opens, so a deaf one reports itself the same way. At
        most MAX_RENEWALS times: then the Output path (always correct, slower) stays."""
        old = change["owner"]
        if not change["new"] or old is not self.plot or self.plot_renewals >= MAX_RENEWALS:
            return
        self.plot_renewals += 1
        self.plot = self._new_plot()
        self.plot.figure = old.figure
        self.children = tuple(self.plot if child is old else child for child in self.children)
        old.close()

    def _fail(self, message: str) -> bool:
        self._message = message
        self.error.value = error_html(message)
        return False


class _Hold:
    def __init__(self, explorer: Explorer) -> None:
        self.explorer = explorer

    def __enter__(self) -> Explorer:
        self.explorer._holding = True
        return self.explorer

    def __exit__(self, *exc: object) -> None:
        self.explorer._holding = False
        self.explorer.update()
