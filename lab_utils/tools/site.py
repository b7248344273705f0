"""A static, browsable copy of the executed course: `make site` -> build/site/index.html.

Each lab is executed in quick mode with papermill (or the copy the test run already wrote to
build/executed/ is reused), then converted to HTML. Plotly figures are stored in notebooks
as `application/vnd.plotly.v1+json`, which static HTML cannot draw, so each one gets an HTML
rendering with plotly.js inlined once per page: the site works offline (a page that would load
a script from the network is refused). Interactive widgets need a running kernel; the page says
so where one was displayed.

What is never published:
  * a FAILED execution: a copy with an error output or papermill's exception mark is executed
    again; if it fails again the lab gets no page and the index says why;
  * a STALE execution: a copy whose code cells differ from the lab's (papermill's injected
    parameters aside), or older than the lab file, is executed again.
Every page has, at its top, when and on what it was executed (papermill's start time and
duration, the mode, this machine's CPU, cores, torch and GPU), a table of contents of its
sections, and previous / next links.
"""

from __future__ import annotations

import html
import json
import os
import platform
import re
import sys
from pathlib import Path
from typing import Callable

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
PAGE_STYLE = (
    "font-family:sans-serif;border:1px solid #d0d7de;border-radius:6px;"
    "padding:8px 14px;margin:8px auto;max-width:1100px;background:#f6f8fa"
)


def _code(nb: nbformat.NotebookNode) -> list[str]:
    """The code cells' sources, without papermill's injected parameters cell."""
    return [
        c.source
        for c in nb.cells
        if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])
    ]


def why_not_publishable(src: Path, executed: Path) -> str | None:
    """None if ``executed`` is a complete, current execution of ``src``; else the reason."""
    if not executed.exists():
        return "not executed yet"
    if executed.stat().st_mtime < src.stat().st_mtime:
        return "stale: the lab changed after this execution"
    nb = nbformat.read(executed, as_version=4)
    if _code(nb) != _code(nbformat.read(src, as_version=4)):
        return "stale: its code cells differ from the lab's"
    for i, cell in enumerate(nb.cells):
        if cell.get("metadata", {}).get("papermill", {}).get("exception"):
            return f"failed: cell {i} raised"
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return f"failed: cell {i} raised {out.get('ename', 'an error')}"
    return None


def execute_missing(
    paths: list[Path],
    executed_dir: Path = EXECUTED,
    runner: Callable[[Path, Path], None] = execute_quick,
) -> dict[Path, str]:
    """Execute (quick mode) every lab whose copy is missing, stale or failed; return the labs
    that still cannot be published, with the reason (they get no page)."""
    executed_dir.mkdir(parents=True, exist_ok=True)
    refused = {}
    for src in paths:
        out = executed_dir / src.name
        if why_not_publishable(src, out) is None:
            continue
        print(f"executing {src.name} (quick mode)", flush=True)
        try:
            runner(src, out)
        except Exception as exc:  # noqa: BLE001 - papermill's PapermillExecutionError and kin
            print(
                f"  {src.name} failed: {str(exc).splitlines()[0] if str(exc) else exc!r}",
                flush=True,
            )
        reason = why_not_publishable(src, out)
        if reason:
            refused[src] = reason
    return refused


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
                data["text/html"] = (
                    '<div style="padding:8px;border:1px dashed #999;color:#555">'
                    "Interactive widget: open this lab in JupyterLab (<code>make lab</code>) "
                    f"to use it. State when executed: {html.escape(data.get('text/plain', ''))}"
                    "</div>"
                )
    return nb


def hardware() -> str:
    """This machine, in a few words (the site is built where the labs were executed)."""
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
        torch_v = f"torch {torch.__version__}"
    except Exception:  # noqa: BLE001 - the site must build even without torch
        gpu, torch_v = "GPU unknown", "torch not importable"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {gpu}, {torch_v}, Python {platform.python_version()}"


def execution_line(nb: nbformat.NotebookNode, machine: str) -> str:
    meta = nb.metadata.get("papermill", {})
    quick = meta.get("parameters", {}).get("QUICK")
    mode = {True: "quick mode", False: "full mode"}.get(quick, "mode unknown")
    when = (meta.get("start_time") or "time unknown").replace("T", " ")[:19]
    took = meta.get("duration")
    took = f" in {took:.0f} s" if isinstance(took, (int, float)) else ""
    return f"Executed {when} UTC ({mode}){took} on {machine}."


def page_chrome(
    body: str, title: str, line: str, prev: tuple[str, str] | None, nxt: tuple[str, str] | None
) -> str:
    """Insert the header (execution line, previous/next, table of contents) into a page."""
    heads = re.findall(r'<h([23])[^>]*\bid="([^"]+)"[^>]*>(.*?)</h\1>', body, flags=re.S)
    toc = "".join(
        f'<li style="margin-left:{(int(level) - 2) * 1.2}em"><a href="#{anchor}">'
        f"{re.sub(r'<[^>]+>', '', text).replace('¶', '').strip()}</a></li>"
        for level, anchor, text in heads
    )
    link = lambda p, label: (
        f'<a href="{p[0]}">{label}: {html.escape(p[1])}</a>'  # noqa: E731
        if p
        else f'<span style="color:#999">{label}: none</span>'
    )
    header = (
        f'<nav class="site-header" style="{PAGE_STYLE}"><div><a href="index.html">'
        f"All labs</a> &middot; {link(prev, '&larr; previous')} &middot; "
        f"{link(nxt, 'next &rarr;')}</div><div style='margin-top:4px'><small>"
        f"{html.escape(line)}</small></div><details open><summary><b>Contents of "
        f"{html.escape(title)}</b></summary><ol class='site-toc'>{toc}</ol></details></nav>"
    )
    footer = (
        f'<nav class="site-footer" style="{PAGE_STYLE}">{link(prev, "&larr; previous")}'
        f" &middot; {link(nxt, 'next &rarr;')}</nav>"
    )
    body = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + header, body, count=1)
    return re.sub(r"(</body>)", lambda m: footer + m.group(1), body, count=1)


def offline_problem(page: str) -> str | None:
    """A page must not load a script from the network (the site works offline)."""
    remote = re.findall(r'<script[^>]+src="(https?://[^"]+)"', page)
    remote = [u for u in remote if "require.js" not in u and "mathjax" not in u.lower()]
    return f"loads {remote[0]}" if remote else None


def build(
    paths: list[Path] | None = None,
    executed_dir: Path = EXECUTED,
    site_dir: Path = SITE,
    runner: Callable[[Path, Path], None] = execute_quick,
) -> Path:
    paths = paths or sorted(LABS.glob("[0-9][0-9]_*.ipynb"))
    refused = execute_missing(paths, executed_dir, runner)
    site_dir.mkdir(parents=True, exist_ok=True)
    exporter, machine = HTMLExporter(template_name="lab"), hardware()
    published = [p for p in paths if p not in refused]
    notebooks = {p: nbformat.read(executed_dir / p.name, as_version=4) for p in published}
    titles = {
        p: next(
            (
                c.source.splitlines()[0].lstrip("# ")
                for c in nb.cells
                if c.cell_type == "markdown" and c.source.strip()
            ),
            p.stem,
        )
        for p, nb in notebooks.items()
    }
    links: dict[Path, str] = {}
    for k, src in enumerate(published):
        (site_dir / f"{src.stem}.html").unlink(missing_ok=True)
        nb = notebooks[src]
        line = execution_line(nb, machine)
        body, _ = exporter.from_notebook_node(make_static(nb))
        near = lambda j: (
            (f"{published[j].stem}.html", titles[published[j]])  # noqa: E731
            if 0 <= j < len(published)
            else None
        )
        page = page_chrome(body, titles[src], line, near(k - 1), near(k + 1))
        problem = offline_problem(page)
        if problem:
            raise RuntimeError(f"{src.name}: the page {problem}; the site must work offline")
        (site_dir / f"{src.stem}.html").write_text(page)
        links[src] = (
            f'<li><a href="{src.stem}.html">{html.escape(titles[src])}</a> '
            f"<small>{html.escape(line)}</small></li>"
        )
    for src, reason in refused.items():
        (site_dir / f"{src.stem}.html").unlink(missing_ok=True)  # never an old page either
        links[src] = (
            f"<li>{html.escape(src.stem)}: <b>not published</b> ({html.escape(reason)})</li>"
        )
    (site_dir / "index.html").write_text(
        "<!doctype html><meta charset='utf-8'><title>Distributed training, hands-on</title>"
        "<body style='font-family:sans-serif;max-width:800px;margin:2em auto'>"
        "<h1>Distributed training, hands-on</h1><p>Every lab as executed in quick mode, with its "
        "outputs and plots. Run them yourself with <code>make lab</code>.</p><ol start='0'>"
        + "".join(links[p] for p in paths)
        + "</ol></body>"
    )
    if refused:
        print("not published: " + "; ".join(f"{s.name} ({r})" for s, r in refused.items()))
    return site_dir / "index.html"


if __name__ == "__main__":
    print(f"site written to {build([Path(p) for p in sys.argv[1:]] or None)}")
