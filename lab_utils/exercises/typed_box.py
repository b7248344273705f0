"""The prediction's text box: the typed text and the request to commit it travel as ONE message.

ipywidgets' Text sends what was typed as state updates and the Enter key as a separate custom
message; while the kernel is busy the page holds the updates back (one in flight at a time) but
not the custom message, so Enter could reach Python before the last keystrokes: "5/8" + Enter
committed 5 (seen in tests/test_browser.py under load). ``TypedBox`` (a small anywidget) sends
``{"type": "commit", "text": ...}`` on Enter or on its Commit button, read by ``on_text``.
"""

from __future__ import annotations

from typing import Any, Callable

import anywidget
import traitlets


class TypedBox(anywidget.AnyWidget):
    """A text box and a Commit button; ``on_text(fn)`` gets the text on Enter or on the button."""

    _esm = """
    function render({ model, el }) {
      const input = document.createElement('input'), button = document.createElement('button');
      input.type = 'text';
      input.placeholder = model.get('placeholder');
      input.className = 'widget-input';
      input.style.cssText = 'width:220px;height:var(--jp-widgets-inline-height,28px);'
        + 'box-sizing:border-box;padding:0 6px;border:1px solid #9e9e9e;font-size:13px';
      button.textContent = 'Commit';
      button.className = 'jupyter-button mod-primary widget-button';
      const send = () => model.send({ type: 'commit', text: input.value });
      input.addEventListener('keydown', e => {
        if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); e.stopPropagation(); send(); }
      });
      button.addEventListener('click', send);
      el.style.cssText = 'display:flex;gap:4px;margin:2px 0';
      el.append(input, button);
    }
    export default { render };
    """
    placeholder = traitlets.Unicode("").tag(sync=True)

    def on_text(self, callback: Callable[[str], None]) -> None:
        def handle(_widget: Any, content: Any, _buffers: Any) -> None:
            if (
                isinstance(content, dict)
                and content.get("type") == "commit"
                and isinstance(content.get("text"), str)
            ):
                callback(content["text"])

        self.on_msg(handle)
