"""`make site` (lab_utils.tools.site) on tiny labs, with a fake executor (no kernel): a failed or
stale execution is never published, every page has its execution time and hardware, a table of
contents and previous / next links, and plotly is inlined (the site works offline)."""

import json
import os
import time

import nbformat
import plotly.graph_objects as go
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from lab_utils.tools import site


def lab(path, title, code, sections=("Part one", "Part two")):
    cells = [new_markdown_cell(f"# {title}")]
    for s in sections:
        cells += [new_markdown_cell(f"## {s}"), new_code_cell(code)]
    nbformat.write(new_notebook(cells=cells), path)
    return path


def fake_runner(calls, fail=()):
    """Writes what papermill would: outputs, the injected parameters cell, its metadata."""

    def run(src, dest):
        calls.append(src.name)
        nb = nbformat.read(src, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                fig = go.Figure(go.Bar(x=[1, 2], y=[3, 4]))
                cell.outputs = [
                    new_output(
                        "display_data",
                        data={site.PLOTLY: json.loads(fig.to_json()), "text/plain": "Figure"},
                    )
                ]
                if src.name in fail:
                    cell.outputs = [
                        new_output("error", ename="RuntimeError", evalue="boom", traceback=[])
                    ]
        nb.cells.insert(
            1, new_code_cell("QUICK = True", metadata={"tags": ["injected-parameters"]})
        )
        nb.metadata["papermill"] = {
            "start_time": "2026-11-27T06:00:00.123456",
            "duration": 12.3,
            "parameters": {"QUICK": True},
        }
        nbformat.write(nb, dest)
        if src.name in fail:
            raise RuntimeError("PapermillExecutionError: boom")

    return run


def test_pages_have_time_hardware_toc_and_neighbours_and_work_offline(tmp_path):
    labs = [lab(tmp_path / f"0{i}_lab.ipynb", f"Lab {i}", f"x = {i}") for i in range(3)]
    calls = []
    index = site.build(labs, tmp_path / "executed", tmp_path / "site", fake_runner(calls))
    assert calls == [p.name for p in labs]
    middle = (tmp_path / "site" / "01_lab.html").read_text()
    assert "Executed 2026-11-27 06:00:00 UTC (quick mode) in 12 s on" in middle
    assert f"{os.cpu_count()} cores" in middle and "torch" in middle
    assert 'href="00_lab.html">&larr; previous: Lab 0' in middle
    assert 'href="02_lab.html">next &rarr;: Lab 2' in middle
    assert "site-toc" in middle and ">Part one</a>" in middle and ">Part two</a>" in middle
    first = (tmp_path / "site" / "00_lab.html").read_text()
    assert "previous: none" in first
    for page in (first, middle):
        assert site.offline_problem(page) is None
        assert "Plotly.newPlot" in page and page.count("plotly.js v") >= 1  # inlined once
        assert 'src="https://cdn.plot.ly' not in page
    assert index.read_text().count("<li><a href=") == 3
    assert site.offline_problem('<script src="https://cdn.plot.ly/plotly.min.js"></script>')


def test_failed_and_stale_executions_are_never_published(tmp_path):
    ok = lab(tmp_path / "00_ok.ipynb", "OK", "x = 1")
    bad = lab(tmp_path / "01_bad.ipynb", "Bad", "raise RuntimeError")
    executed, out = tmp_path / "executed", tmp_path / "site"
    calls = []
    site.build([ok, bad], executed, out, fake_runner(calls, fail={"01_bad.ipynb"}))
    assert not (out / "01_bad.html").exists()
    index = (out / "index.html").read_text()
    assert "01_bad: <b>not published</b> (failed: cell" in index and "RuntimeError" in index
    # the failed copy left in build/executed is never reused: executed again
    calls.clear()
    site.build([ok, bad], executed, out, fake_runner(calls, fail={"01_bad.ipynb"}))
    assert calls == ["01_bad.ipynb"]
    # a lab edited after its execution: stale, executed again before publishing
    time.sleep(0.01)
    lab(ok, "OK", "x = 2")
    assert site.why_not_publishable(ok, executed / ok.name).startswith("stale")
    calls.clear()
    site.build([ok], executed, out, fake_runner(calls))
    assert calls == ["00_ok.ipynb"] and "x = 2" in (executed / ok.name).read_text()
    # same code but older mtime than the executed copy: current, reused
    calls.clear()
    site.build([ok], executed, out, fake_runner(calls))
    assert calls == []
