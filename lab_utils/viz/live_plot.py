"""Redrawing an explorer's figure in place once the page has drawn it (used by ``_base.Explorer``).

Replacing the Output's content makes the page build a new renderer that
draws the whole figure from scratch and rasterises it (0.4-0.7 s per change in headless Chromium on
2 cores). ``LivePlot`` is a tiny anywidget (its module is about 1.2 KB, against plotly's 5 MB, so on
a normal page it loads within anywidget's 2-second window; on a page too slow for that, the model is
replaced: ``LivePlot._on_view_message``) that holds the figure's JSON. When its view finds the graph
the Output drew and plotly's own ``window.Plotly`` (set by the JupyterLab renderer), it reports
``live``; from
then on a change only updates ``plot.figure`` and the view calls ``Plotly.react`` on that graph,
which redraws only what changed. Until then, or where no such page exists (papermill, nbval, VS
Code, an anywidget that never loaded), the Output path runs as before, so the figure is never blank.
"""

from __future__ import annotations

import json
from typing import Any

import anywidget
import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import traitlets

Spec = dict[str, Any]

PLOTLY_MIME = "application/vnd.plotly.v1+json"
MAX_RENEWALS = (
    4  # fresh models for one explorer after the page dropped a model's messages (_base.py)
)


def figure_json(spec: Spec, template: bool = True) -> str | None:
    """The spec as the JSON that plotly's renderer draws: what ``pio.to_json(go.Figure(spec))``
    holds (the specs use plotly.js names, no magic underscores: tests/test_viz.py checks it),
    with the default template filled in (``template=False``: left out, see ``LivePlot.template``),
    at a small fraction of its cost (no validation, no array walk). None for a spec that names
    its own template (the caller then uses to_json)."""
    layout = spec.get("layout", {})
    if "template" in layout:
        return None
    if template:
        layout = dict(layout, template=default_template())
    return json.dumps(
        {"data": spec["data"], "layout": layout}, default=_plain, separators=(",", ":")
    )


_TEMPLATES: dict[str, Any] = {}


def default_template() -> dict[str, Any]:
    """plotly's default template (pio.templates.default) as plotly.js JSON, made once."""
    name = pio.templates.default
    if name not in _TEMPLATES:
        _TEMPLATES[name] = json.loads(pio.to_json(go.Figure(), validate=False))["layout"].get(
            "template", {}
        )
    return _TEMPLATES[name]


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def figure_output(figure: dict[str, Any], title: str) -> dict[str, Any]:
    """One notebook output (display_data) that JupyterLab draws with plotly's mime renderer,
    from the figure (``LivePlot.full()``); text/plain says what it is where no renderer exists."""
    return {
        "output_type": "display_data",
        "metadata": {},
        "data": {PLOTLY_MIME: figure, "text/plain": f"<plotly figure: {title}>"},
    }


class LivePlot(anywidget.AnyWidget):
    """Redraws, in place, the plotly graph that its explorer's Output view drew (module docstring).

    ``figure``: the current figure as plotly JSON text, without the default template, which
    ``template`` holds: sent once, not with every change (it was 6.5 of the memory explorer's
    8.5 KB), and the view hands plotly the SAME template object each time, so Plotly.react's diff
    skips it. ``live``: set by a view once it found that graph and ``window.Plotly``; cleared (and
    the Output refreshed) if a redraw ever fails."""

    _esm = """
    const graph = el => { const box = el.closest('.lab-explorer');
                          return box && box.querySelector('.js-plotly-plot'); };
    function render({ model, el }) {
      let live = false, stopped = false, tries = 0, templateText = null, template;
      // the view's last events, seconds since page load (read by tests/test_browser.py)
      const note = event => {
        const log = (el.dataset.labLiveLog || '').split(' ').filter(Boolean).slice(-11);
        const stamp = (performance.now() / 1000).toFixed(1);
        el.dataset.labLiveLog = [...log, `${event}@${stamp}`].join(' ');
      };
      // to Python, and on the element for a page to read (tests/test_browser.py)
      const report = value => {
        live = value; el.dataset.labLive = value ? 'live' : 'waiting';
        note(value ? 'live' : 'lost');
        model.set('live', value); model.save_changes();
      };
      el.dataset.labLive = 'waiting';
      const draw = () => {
        const gd = graph(el);
        const missing = !gd ? 'graph' : !gd._fullLayout ? 'drawn graph' : !window.Plotly ? 'Plotly'
                        : !model.get('figure') ? 'figure' : '';
        // what a waiting view still lacks (tests/test_browser.py)
        el.dataset.labLiveMissing = missing;
        if (missing === 'figure' && tries % 20 === 0) {  // see LivePlot._on_view_message
          note('no-figure'); model.send({ type: 'no-figure' });
        }
        if (missing) return false;
        // timed for the browser test's latency breakdown (data-lab-live-cost: parse, react ms)
        try {
          const t0 = performance.now(), fig = JSON.parse(model.get('figure'));
          if (model.get('template') !== templateText) {
            templateText = model.get('template');
            template = templateText ? JSON.parse(templateText) : undefined;
          }
          if (template && !fig.layout.template) fig.layout.template = template;
          const t1 = performance.now();
          window.Plotly.react(gd, fig.data, fig.layout);
          el.dataset.labLiveCost = `${t1 - t0} ${performance.now() - t1}`;
          return true;
        } catch (err) {  // thrown out of a timer, it would end the watch for good: try again later
          el.dataset.labLiveError = String(err).slice(0, 200);
          return false;
        }
      };
      // until the Output's renderer has drawn the graph (a slow page: once a second)
      const watch = () => {
        if (stopped) return;
        if (draw()) { report(true); return; }
        setTimeout(watch, ++tries < 300 ? 100 : 1000);
      };
      const changed = () => {
        el.dataset.labLiveArrived = performance.now();  // when the new figure reached the page
        if (!live || draw()) return;
        tries = 0;
        report(false);  // Python redraws through the Output
        watch();
      };
      model.on('change:figure', changed);
      watch();
      return () => { stopped = true; model.off('change:figure', changed); };
    }
    export default { render };
    """
    figure = traitlets.Unicode("").tag(sync=True)
    template = traitlets.Unicode("").tag(sync=True)
    live = traitlets.Bool(False).tag(sync=True)
    deaf = traitlets.Bool(False)  # Python only: the page drops this model's messages (see below)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._no_figure_reports = 0
        self.on_msg(self._on_view_message)

    def full(self) -> dict[str, Any]:
        """The figure as the page draws it: ``figure`` with ``template`` filled in."""
        fig = json.loads(self.figure)
        if self.template and "template" not in fig.get("layout", {}):
            fig.setdefault("layout", {})["template"] = json.loads(self.template)
        return fig

    def _on_view_message(self, _widget: "LivePlot", content: Any, _buffers: list) -> None:
        """A view reports that it has no figure, though Python set one right after opening the
        model.

        The first report may only mean the update is still on its way: it is sent again. A second
        one (about 2 s of the view's polling later) means the page drops this model's messages.
        anywidget (0.11) does that to a model whose module did not load within 2 s of its
        creation: ``Runtime.ready`` rejects at 2000 ms and ``AnyModel._handle_comm_msg`` awaits it
        before handling ANY message, so the view still renders (from the opening state) but no
        update or custom message ever reaches it. A page busy drawing six figures under 20x CPU
        throttling hits that for most of its LivePlots. Such a model can never redraw in place:
        ``deaf`` tells the owner (``_base.Explorer``), which replaces it with a fresh model."""
        if (
            not (isinstance(content, dict) and content.get("type") == "no-figure")
            or not self.figure
        ):
            return
        if (
            self.live
        ):  # a report sent before the resent figure arrived, handled after the view went live
            return
        self._no_figure_reports += 1
        if self._no_figure_reports == 1:
            self.send_state("figure")
        else:
            self.deaf = True
