"""End to end in a real browser: JupyterLab + headless Chromium + the widgets (issue 8).

What a learner does, reading the rendered plotly figure from the PAGE (the DOM), not the kernel:
copy labs/ to a temporary folder (JupyterLab autosaves: the learner's files stay untouched); start
JupyterLab on 127.0.0.1 with a token; open a lab in Chromium (Debian's, driven by Playwright), run
just its widget cell; change a control; wait until the figure's data in the page changes. Fail on
"Error displaying widget" or a widget that never renders; screenshots go to build/screenshots/.

LAB_BROWSER_CPU_THROTTLE=20 (``make soak`` runs it once) slows the page's CPU 20x once the kernel is
up, as on a slow laptop or a loaded CI machine: a figure whose first data arrives only while the
page is fast is a race (plotly's FigureWidget lost ALL its data that way: see
lab_utils/viz/_base.py).
"""

import json
import os
import shutil
import subprocess
import urllib.request
import uuid
from pathlib import Path

import nbformat
import pytest

from lab_utils.tools.jupyter_server import start_lab
from lab_utils.tools.nbtools import LAB_SETTINGS

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "build" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]
THROTTLE = float(os.environ.get("LAB_BROWSER_CPU_THROTTLE", "1"))
SLOW = max(1.0, THROTTLE / 4)
RENDER_TIMEOUT_MS, pytestmark = int(60_000 * SLOW), pytest.mark.timeout(int(600 * SLOW))

if not os.path.exists(CHROMIUM):
    if os.environ.get("CI"):
        pytest.fail(
            "chromium is missing: `make test` installs it (apt-get install chromium)", pytrace=False
        )
    pytest.skip(
        "chromium not installed (on Debian/Ubuntu: apt-get install chromium)",
        allow_module_level=True,
    )
playwright = pytest.importorskip("playwright.sync_api")


# A scratch notebook in the copied labs/: every explorer on one page (one kernel, one page load)
EXPLORERS = (
    "memory_explorer",
    "bubble_explorer",
    "collective_explorer",
    "amdahl_explorer",
    "planner_widget",
    "training_cost_explorer",
)
EVERY_EXPLORER = (
    f"from lab_utils import viz\nfor name in {EXPLORERS}:\n    display(getattr(viz, name)())"
)
# A scratch notebook of predictions as a learner meets them: typed, not preset (LAB_QUICK=0), kept
# in a scratch store; each cell ends with the returned object (a second display would show here)
CHOICES = [
    "that block only",
    "the root and that block",
    "the root, that block and the next",
    "the whole model",
]
PREDICTIONS = [
    "import os, tempfile\nos.environ['LAB_QUICK'] = '0'\n"
    "os.environ['LAB_PREDICTIONS'] = os.path.join(tempfile.mkdtemp(), 'predictions.json')\n"
    "from lab_utils.exercises import predict",
    "g = predict('05.frac', 'ZeRO-1 state as a fraction of DDP state?', unit='x DDP')\ng",
    "g.reveal(formula=0.625, measured=0.625)",
    f"c = predict('05.held', 'Which full weights are held?', choices={CHOICES})\nc",
    "print('the next cell ran')",
    "from lab_utils.cards import review_widget\nreview_widget(lab='00')",
    "from lab_utils import viz\nviz.bubble_explorer()",
]


def number_boxes() -> list[tuple[str, str, str, str, bool]]:
    """(explorer css, control name, box label, its valid text, whole?) for the first whole-number
    box and the first decimal box of every explorer."""
    from lab_utils import viz
    from lab_utils.viz.controls import NumberText

    rows = []
    for name in EXPLORERS:
        w = getattr(viz, name)()
        for whole in (True, False):
            box = next(
                (
                    (n, c)
                    for n, c in w.controls.items()
                    if isinstance(c, NumberText) and c.whole == whole
                ),
                None,
            )
            if box:
                rows.append((f".{w.CSS}", box[0], box[1].description, box[1].value, whole))
    return rows


def widget_cell(call: str) -> tuple[Path, int]:
    """(notebook, cell index) of the first lab cell that calls `call` (e.g. 'memory_explorer(')."""
    for path in sorted((ROOT / "labs").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and call in cell.source:
                return path, i
    pytest.fail(f"no lab notebook has a cell calling {call}")


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory, die_with_pytest):
    """A JupyterLab server on a copy of labs/, with settings that keep the page deterministic."""
    home = tmp_path_factory.mktemp("jupyter")
    labs = home / "labs"
    shutil.copytree(
        ROOT / "labs", labs, ignore=shutil.ignore_patterns("kernel-*", ".ipynb_checkpoints")
    )
    settings = home / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # every cell stays in the DOM (no windowing), so the test can find the widget's output
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    for name, cells in (("every_explorer", [EVERY_EXPLORER]), ("predictions", PREDICTIONS)):
        (labs / f"{name}.ipynb").write_text(
            nbformat.writes(
                nbformat.v4.new_notebook(
                    cells=[
                        nbformat.v4.new_code_cell(c) for c in cells
                    ],  # the labs' kernel: no dialog
                    metadata=nbformat.read(labs / "00_setup.ipynb", as_version=4).metadata,
                )
            )
        )
    news = home / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    for plugin, values in LAB_SETTINGS.items():  # what `make lab` installs (saved widget state)
        folder, name = plugin.split(":")
        (home / "settings" / folder).mkdir(parents=True, exist_ok=True)
        (home / "settings" / folder / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
    try:
        proc, base, token = start_lab(
            home, labs, {"LAB_QUICK": "1"}, preexec_fn=die_with_pytest, timeout_s=60
        )
    except RuntimeError as e:
        pytest.fail(str(e))
    # the server as `make lab` configures it (the environment's jupyter_server_config.d, written
    # by install_lab_settings): kernel messages sent without Nagle's delay
    assert "send without delay (TCP_NODELAY)" in (home / "jupyter.log").read_text(), (
        "the lab_utils server extension did not load: run "
        "`python -m lab_utils.tools.nbtools lab-settings` (make does, when it builds the venv)"
    )
    yield base, token
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with playwright.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 800},
        )
        yield context
        context.close()


GRAPH_DATA = (
    "JSON.stringify((gd.data || []).map(t => [t.x, t.y, t.base]))"  # JS, of a graph div `gd`
)


def figure_data(explorer) -> str:
    """The plotly traces as the page has them (the graph div's `data`), as JSON text."""
    return explorer.locator(".js-plotly-plot").first.evaluate(f"gd => {GRAPH_DATA}")


def wait_for_first_draw(page, explorer, css: str) -> str:
    """Wait until plotly has drawn the figure WITH its data, and return that data: the graph div
    can appear before its data (on a busy machine, seconds before), so wait for the data itself."""
    explorer.locator(".js-plotly-plot").first.wait_for(timeout=RENDER_TIMEOUT_MS)
    page.wait_for_function(
        """sel => {
            const gd = document.querySelector(sel + ' .js-plotly-plot');
            return gd && (gd.data || []).length > 0 && gd._fullLayout;
        }""",
        arg=css,
        timeout=RENDER_TIMEOUT_MS,
    )
    return figure_data(explorer)


def open_and_run_cell(browser, base: str, token: str, notebook: Path, index: int):
    page = browser.new_page()
    page.set_default_timeout(RENDER_TIMEOUT_MS)  # clicks and key presses too (a throttled page)
    # a workspace of its own: in the shared default one, JupyterLab reopens every notebook an
    # earlier test opened (their kernels still live), and `.first` of an explorer's CSS class found
    # the graph in a background tab, which Playwright rightly calls hidden (the throttled run)
    page.goto(f"{base}/lab/workspaces/{uuid.uuid4().hex[:12]}/tree/{notebook.name}?token={token}")
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
        " && window.jupyterapp.shell.currentWidget.sessionContext"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel",
        timeout=RENDER_TIMEOUT_MS,
    )
    if THROTTLE > 1:  # from here on, as slow as a slow machine (Chrome DevTools CPU throttling)
        page.context.new_cdp_session(page).send(
            "Emulation.setCPUThrottlingRate", {"rate": THROTTLE}
        )
    page.evaluate(
        """async ([name, index]) => {
        const sleep = ms => new Promise(r => setTimeout(r, ms));
        let panel = window.jupyterapp.shell.currentWidget;
        // this tab, not the last one
        while (!panel || !panel.context || !panel.context.path.endsWith(name)) {
            await sleep(100);
            panel = window.jupyterapp.shell.currentWidget;
        }
        await panel.context.ready;             // the cells are loaded
        await panel.sessionContext.ready;      // the kernel is up
        while (panel.content.widgets.length <= index) await sleep(100);
        panel.content.activeCellIndex = index;
        if (panel.content.activeCellIndex !== index)
            throw new Error('could not select cell ' + index);
        await window.jupyterapp.commands.execute('notebook:run-cell');
    }""",
        [notebook.name, index],
    )
    tabs = page.evaluate(
        "() => [...window.jupyterapp.shell.widgets('main')].map(w => w.title.label)"
    )
    assert tabs == [notebook.name], (
        f"the page must show only {notebook.name}, it has the tabs {tabs}"
    )
    return page


@pytest.mark.parametrize(
    "call, css, change",
    [
        ("memory_explorer(", ".memory-explorer", "model"),
        ("bubble_explorer(", ".bubble-explorer", "m"),
    ],
)
def test_widget_renders_and_a_control_changes_the_plot(jupyter, browser, call, css, change):
    base, token = jupyter
    notebook, index = widget_cell(call)
    page = open_and_run_cell(browser, base, token, notebook, index)
    name = css.strip(".")
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        explorer = page.locator(css).first
        before = wait_for_first_draw(page, explorer, css)
        page.screenshot(path=str(SHOTS / f"{name}-before.png"))
        if change == "model":  # a dropdown: pick another model size
            select = explorer.locator(".widget-dropdown:has(label:text-is('model')) select")
            current = select.input_value()
            options = [o for o in select.locator("option").all_inner_texts() if o != current]
            select.select_option(label=next(o for o in options if "70B" in o))
        else:  # a number box: fewer micro-batches -> a bigger bubble
            box = explorer.locator(".widget-text:has(label:text-is('m (micro-batches)')) input")
            box.fill("4")
            box.press("Enter")
        page.wait_for_function(
            """([sel, before]) => {
                const gd = document.querySelector(sel + ' .js-plotly-plot');
                return gd && """
            + GRAPH_DATA
            + """ !== before;
            }""",
            arg=[css, before],
            timeout=RENDER_TIMEOUT_MS,
        )
        after = figure_data(explorer)
        assert after != before
        assert explorer.locator(".lab-widget-error").count() == 0, (
            "a valid change must not show an error"
        )
        plot = explorer.locator(".js-plotly-plot").first.bounding_box()
        assert plot["x"] + plot["width"] <= 1280, f"the figure overflows a 1280-px window: {plot}"
        page.screenshot(path=str(SHOTS / f"{name}-after.png"))
        assert "Error displaying widget" not in page.content()
    except Exception:
        page.screenshot(path=str(SHOTS / f"{name}-FAILED.png"), full_page=True)
        raise
    finally:
        page.close()


# per explorer, every typed value's ms; and the table below, printed by benchmarks/bench_widgets.py
LATENCY_FILE = ROOT / "build" / "browser_latency.json"
LATENCY_TABLE = LATENCY_FILE.with_suffix(".txt")
PAGE_GOAL_P95_MS = 100.0  # keydown to painted frame (issue 37): reported, never asserted
# typed values per explorer: 2 x this (benchmarks/bench_widgets.py asks for more)
LATENCY_PAIRS = int(os.environ.get("LAB_LATENCY_PAIRS", "5"))

# For each explorer: a number box and two valid values that each change its figure's data
LATENCY_INPUTS = {
    ".memory-explorer": ("seq len (tokens)", "4096", "2048"),
    ".bubble-explorer": ("m (micro-batches)", "4", "8"),
    ".collective-explorer": ("message D (MB)", "50", "100"),
    ".amdahl-explorer": ("serial fraction s (0-1)", "0.1", "0.05"),
    ".planner-widget": ("nodes", "16", "32"),
    ".training-cost-explorer": ("tokens (billions)", "1000", "2000"),
}


@pytest.fixture(scope="module")
def every_explorer_page(jupyter, browser):
    """One page with every explorer (one kernel start for the tests that use it)."""
    base, token = jupyter
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = open_and_run_cell(browser, base, token, Path("every_explorer.ipynb"), 0)
    yield page
    page.close()


# In the page: the time of the Enter keydown, then, on every animation frame, whether `done(sel)`
# holds; the frame after that one starts once it was painted (__labTimer: keydown to painted frame)
PAGE_TIMER = """([sel, probe]) => {
    const done = new Function('sel', 'return (' + probe + ')(sel)');
    window.__labTimer = null;
    const box = document.querySelector(sel);
    const onKey = e => {
        if (e.key !== 'Enter') return;
        box.removeEventListener('keydown', onKey, true);
        const t0 = window.__labT0 = performance.now();
        const painted = () => { window.__labTimer = performance.now() - t0; };
        const check = () => requestAnimationFrame(done(sel) ? painted : check);
        requestAnimationFrame(check);
    };
    box.addEventListener('keydown', onKey, true);
}"""
NEW_DATA = (
    "sel => { const gd = document.querySelector(sel + ' .js-plotly-plot');"
    f" return gd && {GRAPH_DATA} !== window.__labBefore; }}"
)
ERROR_SHOWN = "sel => !!document.querySelector(sel + ' .lab-widget-error')"


LIVE_VIEWS = (
    "() => [...document.querySelectorAll('[data-lab-live]')]"
    ".map(e => [e.dataset.labLive, e.dataset.labLiveMissing || '', e.dataset.labLiveError || '',"
    " e.dataset.labLiveLog || ''])"
)


def wait_until_every_view_is_live(page) -> None:
    """Every explorer's LivePlot view redraws in place (data-lab-live='live'). On a page too slow
    for anywidget's 2-second window a model is replaced first (lab_utils/viz/_base.py, _on_deaf)."""
    try:
        page.wait_for_function(
            """n => { const v = [...document.querySelectorAll('[data-lab-live]')];
                      return v.length === n && v.every(e => e.dataset.labLive === 'live'); }""",
            arg=len(EXPLORERS),
            timeout=RENDER_TIMEOUT_MS,
        )
    except playwright.TimeoutError:
        pytest.fail(
            f"not every LivePlot view went live within {RENDER_TIMEOUT_MS / 1000:g} s; "
            f"views (live, missing, error, events): {page.evaluate(LIVE_VIEWS)}"
        )


# Where the time went, from LivePlot's marks (live_plot.py): keydown to the new figure's arrival
# (page -> server -> kernel -> page, the kernel's work included), JSON.parse, Plotly.react
PARTS = """sel => { const v = document.querySelector(sel + ' [data-lab-live]');
    const [parse, react] = (v.dataset.labLiveCost || 'NaN NaN').split(' ').map(Number);
    return {arrival: Number(v.dataset.labLiveArrived) - window.__labT0, parse, react}; }"""


def typed_latency(
    page, explorer, css: str, box, value: str, probe: str = NEW_DATA
) -> tuple[float, bool]:
    """ms from the Enter keydown to the first animation frame at which the page shows the result
    (by default: new plot data in the graph), timed in the page itself (performance.now), and
    whether the graph was redrawn in place (the same element: LivePlot's Plotly.react) rather than
    replaced by a new renderer."""
    page.evaluate(
        f"sel => {{ const gd = document.querySelector(sel + ' .js-plotly-plot'); "
        f"window.__labBefore = {GRAPH_DATA}; }}",
        css,
    )
    explorer.locator(".js-plotly-plot").first.evaluate(f"gd => gd.dataset.labMark = '{value}'")
    box.fill(value)
    page.evaluate(PAGE_TIMER, [css, probe])
    box.press("Enter")
    page.wait_for_function("() => window.__labTimer !== null", timeout=RENDER_TIMEOUT_MS)
    ms = page.evaluate("() => window.__labTimer")
    if probe == NEW_DATA:
        PARTS_SEEN.setdefault(css, []).append(dict(page.evaluate(PARTS, css), total=ms))
    return ms, explorer.locator(f".js-plotly-plot[data-lab-mark='{value}']").count() == 1


PARTS_SEEN: dict[str, list[dict]] = {}


def latency_table(parts: dict[str, list[dict]], floor: list[float]) -> str:
    """Per explorer: median and p95 of keydown -> painted frame against the goal, and where the
    time went; then the round trip with nothing to draw (``floor``)."""

    def q(xs: list[float], p: float) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, round(p * (len(xs) - 1)))]

    lines = [
        f"keydown -> painted frame per explorer (browser), goal p95 <= {PAGE_GOAL_P95_MS:g} ms",
        f"{'explorer':<24} {'total med':>9} {'p95':>6} | {'arrival':>7} {'parse':>6} "
        f"{'react':>6} {'frame':>6}  (ms, medians; n)",
    ]
    for css, rows in parts.items():
        col = {k: [r[k] for r in rows] for k in ("total", "arrival", "parse", "react")}
        frame = [r["total"] - r["arrival"] - r["parse"] - r["react"] for r in rows]
        p95 = q(col["total"], 0.95)
        lines.append(
            f"{css.strip('.'):<24} {q(col['total'], 0.5):9.0f} {p95:6.0f} | "
            f"{q(col['arrival'], 0.5):7.0f} {q(col['parse'], 0.5):6.1f} "
            f"{q(col['react'], 0.5):6.1f} {q(frame, 0.5):6.0f}  n={len(rows)}  "
            f"{'ok' if p95 <= PAGE_GOAL_P95_MS else 'SLOW'}"
        )
    lines.append(
        f"round trip alone (a rejected value: the error box, no plot): median "
        f"{q(floor, 0.5):.0f} ms, n={len(floor)}"
    )
    return "\n".join(lines)


def test_bad_typed_value_is_named_and_input_to_dom_latency_is_recorded(every_explorer_page):
    """Typed for real: 2.5 into the bubble explorer's integer box m shows the widget's error (the
    figure keeps its last valid input); then valid values redraw every explorer. The time from the
    Enter key to the new plot data in the DOM is recorded in build/browser_latency.json (no assert
    on wall-clock time here: benchmarks/bench_widgets.py measures it on a quiet machine against the
    goal, p95 <= 100 ms). Every
    redraw after the first must happen in place (LivePlot), the path that can meet that goal."""
    page, css = every_explorer_page, ".bubble-explorer"
    try:
        explorer = page.locator(css).first
        before = wait_for_first_draw(page, explorer, css)
        box = explorer.locator(".widget-text:has(label:text-is('m (micro-batches)')) input")
        box.fill("2.5")
        box.press("Enter")
        error = explorer.locator(".lab-widget-error")
        error.first.wait_for(timeout=RENDER_TIMEOUT_MS)
        assert "m (micro-batches)" in error.first.inner_text()
        assert figure_data(explorer) == before, "a bad value must not change the figure"
        page.screenshot(path=str(SHOTS / "bubble-explorer-bad-value.png"))
        wait_until_every_view_is_live(page)
        latencies, in_place = {}, {}
        for css, (label, first, second) in LATENCY_INPUTS.items():
            explorer = page.locator(css).first
            wait_for_first_draw(page, explorer, css)
            box = explorer.locator(f".widget-text:has(label:text-is('{label}')) input")
            runs = [
                typed_latency(page, explorer, css, box, v) for v in (first, second) * LATENCY_PAIRS
            ]
            latencies[f"{css.strip('.')}, {label} typed (Enter -> DOM)"] = [ms for ms, _ in runs]
            in_place[css] = [same for _, same in runs]
            assert explorer.locator(".lab-widget-error").count() == 0, (
                f"{css}: valid values show no error"
            )
        # the floor under any redraw: the same round trip (page -> server -> kernel -> page) with no
        # plot to draw, a rejected value whose only effect is the error box
        css, (label, first, _) = ".amdahl-explorer", LATENCY_INPUTS[".amdahl-explorer"]
        explorer = page.locator(css).first
        box = explorer.locator(f".widget-text:has(label:text-is('{label}')) input")
        floor = []
        for _ in range(4):
            floor.append(typed_latency(page, explorer, css, box, "abc", ERROR_SHOWN)[0])
            box.fill(first)
            box.press("Enter")
            explorer.locator(".lab-widget-error").first.wait_for(
                state="detached", timeout=RENDER_TIMEOUT_MS
            )
        latencies[
            "round trip alone: amdahl-explorer, 'abc' typed (Enter -> error box, no plot)"
        ] = floor
        LATENCY_FILE.parent.mkdir(parents=True, exist_ok=True)
        LATENCY_FILE.write_text(json.dumps(latencies))
        (LATENCY_FILE.parent / "browser_latency_parts.json").write_text(json.dumps(PARTS_SEEN))
        for name, ms in latencies.items():
            print(f"{name}: {[round(x) for x in ms]} ms")
        table = latency_table(PARTS_SEEN, floor)
        LATENCY_TABLE.write_text(table + "\n")
        print(table)
        assert all(all(flags) for flags in in_place.values()), (
            f"not redrawn in place: {in_place}; views (live, missing, error, events): "
            f"{page.evaluate(LIVE_VIEWS)}"
        )
    except Exception:
        page.screenshot(path=str(SHOTS / "latency-FAILED.png"), full_page=True)
        raise


def test_every_number_box_rejects_what_it_cannot_take_when_typed(every_explorer_page):
    """Typed for real into every explorer on one page: 2.5 into a whole-number box and "abc" into a
    decimal box each show that explorer's error box naming the control, leave its figure as it
    was, and retyping the valid value clears the error."""
    page = every_explorer_page
    rows = number_boxes()
    assert {r[0] for r in rows} >= {".memory-explorer", ".bubble-explorer", ".amdahl-explorer"}
    try:
        for css, name, label, valid, whole in rows:
            explorer = page.locator(css).first
            before = wait_for_first_draw(page, explorer, css)
            box = explorer.locator(f".widget-text:has(label:text-is('{label}')) input")
            box.fill("2.5" if whole else "abc")
            box.press("Enter")
            error = explorer.locator(".lab-widget-error")
            error.first.wait_for(timeout=RENDER_TIMEOUT_MS)
            text = error.first.inner_text().replace(" ", "")
            short = label.split(" (")[0].replace(" ", "")  # "t_b / t_f" is "t_b/t_f" in a message
            assert name in text or short in text, f"{css}: the error must name {label!r}: {text}"
            assert figure_data(explorer) == before, f"{css}: a bad {label!r} changed the figure"
            box.fill(valid)
            box.press("Enter")
            error.first.wait_for(state="detached", timeout=RENDER_TIMEOUT_MS)
    except Exception:
        page.screenshot(path=str(SHOTS / "every-explorer-FAILED.png"), full_page=True)
        raise


ACTIVE_CELL = "() => window.jupyterapp.shell.currentWidget.content.activeCellIndex"
RUN_CELLS = """async indices => { const nb = window.jupyterapp.shell.currentWidget.content;
    for (const i of indices) { nb.activeCellIndex = i;
                               await window.jupyterapp.commands.execute('notebook:run-cell'); } }"""
CUT_LABELS = """() => [...document.querySelectorAll('.lab-prediction :is(label, button)')]
    .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)"""


def test_predictions_as_typed_commit_with_enter_and_survive_a_reopen(jupyter, browser):
    """Issue 37.6: "5/8" and Enter commit; the input becomes plain HTML (no stale "not committed"
    box, the reveal fills in once); the keyboard focus goes to the next cell (Shift+Enter runs
    it); every choice shows whole; the saved notebook, reopened on a new kernel, shows both
    guesses, the flashcards and an explorer's figure (saved widget state) instead of "Error
    displaying widget"."""
    base, token = jupyter
    page = open_and_run_cell(browser, base, token, Path("predictions.ipynb"), 0)
    cells = page.locator(".jp-Notebook .jp-Cell")
    try:
        page.evaluate(RUN_CELLS, [1, 2, 3])
        box = cells.nth(1).locator(".lab-prediction input[type=text]")
        box.click()
        box.type("5/8")
        box.press("Enter")
        cells.nth(1).locator(".lab-prediction-committed").wait_for()
        # the reveal below is redrawn by a display update of its own, which may arrive after the
        # committed box: wait for it rather than read the cell at once (a race, seen once)
        cells.nth(2).locator(".jp-OutputArea-output:has-text('exact')").wait_for()
        assert "0.625" in cells.nth(1).inner_text() and "exact" in cells.nth(2).inner_text()
        assert page.evaluate(ACTIVE_CELL) == 2, "the focus must move on to the next cell"
        assert page.evaluate(CUT_LABELS) == [], "a choice or button label is cut"
        page.screenshot(path=str(SHOTS / "prediction-choices.png"))
        cells.nth(3).locator(f"label:has-text('{CHOICES[2]}')").click()
        cells.nth(3).locator("button:text-is('Commit')").click()
        cells.nth(3).locator(".lab-prediction-committed").wait_for()
        assert "your choice" in cells.nth(3).inner_text() and page.evaluate(ACTIVE_CELL) == 4
        page.keyboard.press("Shift+Enter")
        cells.nth(4).locator(".jp-OutputArea-output:has-text('the next cell ran')").wait_for()
        assert "not committed yet" not in page.content()
        assert cells.nth(1).locator(".jp-OutputArea-output").count() == 1  # the box, once
        page.evaluate(RUN_CELLS, [5, 6])
        cells.nth(5).locator(".lab-cards .lab-widget-title").wait_for()
        wait_for_first_draw(page, cells.nth(6).locator(".bubble-explorer"), ".bubble-explorer")
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    finally:
        page.close()
    sessions = json.load(urllib.request.urlopen(f"{base}/api/sessions?token={token}"))
    for s in sessions:  # the kernel ends: its widget models are gone, as after a restart
        urllib.request.urlopen(
            urllib.request.Request(f"{base}/api/sessions/{s['id']}?token={token}", method="DELETE")
        )
    page = open_and_run_cell(browser, base, token, Path("predictions.ipynb"), 4)
    try:
        page.locator(".lab-prediction-committed").nth(1).wait_for()
        text = page.locator(".jp-Notebook").inner_text()
        assert "0.625" in text and CHOICES[2] in text and "your choice" in text
        page.locator(".lab-cards .lab-widget-title").wait_for()  # from the saved widget state
        wait_for_first_draw(page, page.locator(".bubble-explorer"), ".bubble-explorer")
        assert "Error displaying widget" not in page.content()
        page.screenshot(path=str(SHOTS / "prediction-reopened.png"))
    finally:
        page.close()


# In the page, for one explorer: what a learner would see cut or covered (element boxes)
LAYOUT_PROBLEMS = """sel => {
    const root = document.querySelector(sel), out = [];
    const box = e => e.getBoundingClientRect();
    const name = e => (e.getAttribute('class') || e.tagName).split(' ')[0] + ' "'
                      + (e.textContent || '').trim().slice(0, 30) + '"';
    const cover = (a, b) => Math.max(0, Math.min(a.right, b.right) - Math.max(a.left, b.left))
                          * Math.max(0, Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top));
    const inside = (a, b) => a.left >= b.left - 0.5 && a.right <= b.right + 0.5;
    const gd = root.querySelector('.js-plotly-plot');
    const texts = [...gd.querySelectorAll('.gtitle, .xtitle, .ytitle, .y2title, .y3title, '
                                          + '.x2title, .x3title, .annotation, .legend .bg')]
        .filter(e => box(e).width > 0);
    for (let i = 0; i < texts.length; i++)
        for (let j = i + 1; j < texts.length; j++)
            if (cover(box(texts[i]), box(texts[j])) > 4)
                out.push(`${name(texts[i])} overlaps ${name(texts[j])}`);
    for (const e of texts)
        if (!inside(box(e), box(gd))) out.push(`${name(e)} sticks out of the figure`);
    const area = root.closest('.jp-OutputArea-output') || root.parentElement;
    if (!inside(box(root), box(area))) out.push('the explorer is wider than its output area');
    for (const e of root.querySelectorAll('input, select, button')) {
        const cell = e.closest('.widget-inline-hbox') || root;
        if (!inside(box(e), box(cell)) || !inside(box(e), box(root)))
            out.push(`${name(e.closest('.widget-inline-hbox') || e)} input is clipped`);
    }
    const ctx = document.createElement('canvas').getContext('2d');
    for (const e of root.querySelectorAll('select')) {
        const s = getComputedStyle(e), text = e.options[e.selectedIndex]?.text || '';
        ctx.font = s.font;
        const room = e.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
        if (ctx.measureText(text).width > room) out.push(`dropdown text cut: "${text}"`);
    }
    for (const e of root.querySelectorAll('label'))
        if (e.scrollWidth > e.clientWidth + 1) out.push(`label cut: "${e.textContent}"`);
    const scroller = root.closest('.jp-WindowedPanel-outer') || root.closest('.jp-Notebook');
    const tall = box(gd).bottom - box(root).top, room = scroller.clientHeight;
    if (tall > room) out.push(`controls + figure ${Math.round(tall)} px tall in a ${room} px area`);
    return out;
}"""


@pytest.mark.parametrize("size", [(1280, 800), (1920, 1080)], ids=["1280x800", "1920x1080"])
def test_every_explorer_fits_the_screen_without_overlaps(every_explorer_page, size):
    """Issue 37.4: at a laptop's 1280x800 and a desktop's 1920x1080, no explorer has text over
    text in its figure (legend, title, annotations, axis titles), a control cut or sticking out,
    a dropdown that cuts its own text, or a height that does not fit the notebook area."""
    page = every_explorer_page
    page.set_viewport_size({"width": size[0], "height": size[1]})
    try:
        problems = {}
        for css in LATENCY_INPUTS:
            explorer = page.locator(css).first
            wait_for_first_draw(page, explorer, css)
            explorer.scroll_into_view_if_needed()
            page.wait_for_timeout(300)  # plotly redraws on a resize
            explorer.screenshot(path=str(SHOTS / f"{css.strip('.')}-{size[0]}x{size[1]}.png"))
            problems[css] = page.evaluate(LAYOUT_PROBLEMS, css)
        print(json.dumps(problems, indent=1))
        assert not any(problems.values()), problems
    finally:
        page.set_viewport_size({"width": 1280, "height": 800})
