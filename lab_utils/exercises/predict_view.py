"""How a prediction looks in the notebook: an input until the commit, plain HTML from then on.

The input (a text box, or one radio button per choice, and a Commit button) is displayed with a
display id. The commit REPLACES that output with plain HTML (the question and the committed
guess; for a multiple choice every option, the chosen one marked). Plain HTML is saved in the
notebook file, so a reopened notebook shows the learner's guesses, where a widget would read
"Error displaying widget: model not found" once its kernel is gone. A reveal is plain HTML from
the start, replaced in place when the guess arrives.

Keyboard: Enter in the text box commits. The commit removes the focused control from the page,
which leaves the keyboard focus nowhere (Shift+Enter did nothing until the learner clicked a
cell); a short script in the committed HTML selects the next cell and focuses the notebook, only
right after the commit (a reopened, trusted notebook runs it again: the age check stops it).
"""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from lab_utils.exercises.prediction_store import BOX_STYLE, fmt

if TYPE_CHECKING:
    from lab_utils.exercises.predict import Prediction

GREY, GREEN, RED = "#57606a", "#1a7f37", "#8a1c1c"
NOT_COMMITTED = "not committed yet"  # what an uncommitted prediction's old copy would say
# Output metadata of a reveal: its key and the numbers it holds back until the commit (not shown;
# the audit of an executed notebook, tools/answer_leaks.py, looks for them in nearby outputs).
REVEAL_META = "lab_reveal"
# Runs once, when JupyterLab renders the committed HTML: if the focus was lost with the removed
# control, select the next cell (the notebook's own mousedown handling) and focus the notebook.
FOCUS_NEXT_CELL = """<script>(() => {
  const me = document.currentScript, age = Date.now() - %d, focused = document.activeElement;
  if (!me || age > 30000 || (focused && focused !== document.body)) return;
  const cell = me.closest('.jp-Cell');
  if (!cell) return;
  let next = cell.nextElementSibling;
  while (next && !next.classList.contains('jp-Cell')) next = next.nextElementSibling;
  const target = next || cell, click = {bubbles: true, cancelable: true, button: 0};
  target.dispatchEvent(new MouseEvent('mousedown', click));
  target.dispatchEvent(new MouseEvent('mouseup', click));
  (target.closest('.jp-Notebook') || target).focus();
})()</script>"""


def committed_html(p: "Prediction") -> str:
    """The question and the committed guess (every option, the chosen one marked)."""
    preset = f" <i style='color:{GREY}'>(quick mode: a preset guess)</i>" if p.preset else ""
    if p.choices:
        items = "".join(
            f"<li style='color:{GREEN}'><b>&#9673; {html.escape(c)}</b> (your choice)</li>"
            if c == p.value
            else f"<li style='color:{GREY}'>&#9675; {html.escape(c)}</li>"
            for c in p.choices
        )
        guess = f"<ul style='list-style:none;padding-left:8px;margin:4px 0'>{items}</ul>"
    else:
        guess = (
            f"<br>committed: <b>{html.escape(fmt(p.value))}</b> {html.escape(p.unit)}"
            if p.committed
            else f"<br>{NOT_COMMITTED}"
        )
    return (
        f'<div class="lab-prediction-committed" style="{BOX_STYLE}"><b>Your prediction:</b> '
        f"{html.escape(p.question)}{preset}{guess}</div>"
    )


def bundle(text: str, page_html: str) -> dict[str, str]:
    return {"text/plain": text, "text/html": page_html}


def show_input(p: "Prediction") -> None:
    """Display the input; once committed, replace it with the committed HTML (see above)."""
    from IPython.display import display

    handle = display(_input_widget(p), display_id=True)

    def replace() -> None:
        focus = FOCUS_NEXT_CELL % int(time.time() * 1000)
        handle.update(bundle(repr(p), committed_html(p) + focus), raw=True)

    p._listeners.append(replace)


def show_live(
    render: Callable[[], str], text: Callable[[], str], meta: dict | None = None
) -> Callable[[], None]:
    """Display ``render()`` as plain HTML now; the returned function redraws it in place."""
    from IPython.display import display

    md = {REVEAL_META: meta} if meta else None
    handle = display(bundle(text(), render()), raw=True, display_id=True, metadata=md)
    return lambda: handle.update(bundle(text(), render()), raw=True, metadata=md)


def show_after_commit(p: "Prediction", items: Sequence[Any]) -> None:
    """Display each of ``items`` (a table, a figure: what shows the answer) only once ``p`` is
    committed: now if it is, else an empty output that the commit fills in place."""
    from IPython.display import display

    for item in items:
        if p.committed:
            display(item)
            continue
        handle = display({"text/plain": ""}, raw=True, display_id=True)
        p._listeners.append(lambda h=handle, it=item: _fill(h, it))


def _fill(handle: Any, item: Any) -> None:
    from IPython.core.formatters import format_display_data

    data, metadata = format_display_data(item)
    handle.update(data, metadata=metadata, raw=True)


def _input_widget(p: "Prediction") -> Any:
    """A question, an input (a text box, or one radio button per choice), a Commit button and an
    error line."""
    import ipywidgets as widgets

    from lab_utils.exercises.typed_box import TypedBox

    label = widgets.HTML(f"<b>Your prediction:</b> {html.escape(p.question)}")
    error = widgets.HTML()

    def commit(value: Any) -> None:
        if p.committed:
            return
        if value is None:
            error.value = f"<span style='color:{RED}'>choose one of the options first</span>"
            return
        try:
            p.commit(value)  # the listeners replace this widget with the committed HTML
        except ValueError as exc:
            error.value = f"<span style='color:{RED}'>{html.escape(str(exc))}</span>"

    if p.choices:  # one option per line, each label whole (toggle buttons cut long ones)
        radio = widgets.RadioButtons(
            options=list(p.choices), value=None, layout=widgets.Layout(width="auto")
        )
        button = widgets.Button(description="Commit", button_style="primary")
        button.on_click(lambda _: commit(radio.value))
        row: Any = widgets.VBox([radio, button])
    else:  # Enter or Commit sends the text with the request (typed_box.py)
        row = TypedBox(placeholder="a number" + (f" ({p.unit})" if p.unit else ""))
        row.on_text(commit)
    view = widgets.VBox([label, row, error])
    view.add_class("lab-prediction")
    return view
