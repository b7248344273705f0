"""A static, browsable copy of the executed course: `make site` -> build/site/index.html.

Each lab is executed in quick mode with papermill (or the copy the test run already wrote to
build/executed/ is reused), then converted to HTML. Plotly figures are stored in notebooks
as `application/vnd.plotly.v1+json`, which static HTML cannot draw, so each one gets an HTML
rendering with plotly.js inlined once per page: the site works offline. Interactive widgets
need a running kernel; the page says so where one was displayed.
"""
from __future__ import annotations

import html
import json
import sys
from pathlib import Path

import nbformat
import plotly.io as pio
from nbconvert import HTMLExporter

from lab_utils.tools.nbtools import execute_quick

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
EXECUTED = ROOT / "build" / "executed"
SITE = ROOT / "build" / "site"
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"


def execute_missing(paths: list[Path]) -> None:
    """Run papermill (quick mode) for labs with no executed copy newer than the source."""
    EXECUTED.mkdir(parents=True, exist_ok=True)
    for src in paths:
        out = EXECUTED / src.name
        if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
            continue
        print(f"executing {src.name} (quick mode)", flush=True)
        execute_quick(src, out)


def make_static(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Give every plotly output an HTML rendering; replace widget views with a note."""
    first = True
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if PLOTLY in data and "text/html" not in data:
                spec = data[PLOTLY]
                fig = pio.from_json(spec if isinstance(spec, str) else json.dumps(spec))
                data["text/html"] = pio.to_html(fig, include_plotlyjs=first, full_html=False)
                first = False
            if WIDGET in data:
                data["text/html"] = ('<div style="padding:8px;border:1px dashed #999;color:#555">'
                                     "Interactive widget: open this lab in JupyterLab (<code>make lab</code>) "
                                     f"to use it. State when executed: {html.escape(data.get('text/plain', ''))}"
                                     "</div>")
    return nb


def build(paths: list[Path] | None = None) -> Path:
    paths = paths or sorted(LABS.glob("[0-9][0-9]_*.ipynb"))
    execute_missing(paths)
    SITE.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter(template_name="lab")
    links = []
    for src in paths:
        nb = make_static(nbformat.read(EXECUTED / src.name, as_version=4))
        body, _ = exporter.from_notebook_node(nb)
        (SITE / f"{src.stem}.html").write_text(body)
        title = next((c.source.splitlines()[0].lstrip("# ") for c in nb.cells if c.cell_type == "markdown"),
                     src.stem)
        links.append(f'<li><a href="{src.stem}.html">{html.escape(title)}</a></li>')
    (SITE / "index.html").write_text(
        "<!doctype html><meta charset='utf-8'><title>Distributed training, hands-on</title>"
        "<body style='font-family:sans-serif;max-width:800px;margin:2em auto'>"
        "<h1>Distributed training, hands-on</h1><p>Every lab as executed in quick mode, with its "
        "outputs and plots. Run them yourself with <code>make lab</code>.</p><ol start='0'>"
        + "".join(links) + "</ol></body>")
    return SITE / "index.html"


if __name__ == "__main__":
    print(f"site written to {build([Path(p) for p in sys.argv[1:]] or None)}")
