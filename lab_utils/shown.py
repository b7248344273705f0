"""Objects a helper displays itself, so that ending a cell with them shows nothing twice.

``show_table(...)``, ``predict(...)`` and ``.reveal(...)`` display their result AND return it (to
be read or kept). A cell whose last line is such a call, or the name it was assigned to, would
show it a second time through IPython's display hook; a returned prediction would even show a
second, stale box ("not committed yet") under the live one. A ``ShownOnce`` that was displayed
(``show()``) is not displayed again as a cell's value.
"""

from __future__ import annotations

from typing import Any


def in_notebook() -> bool:
    """True inside IPython (a notebook kernel, or an IPython shell): rich display is there."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


class ShownOnce:
    """Mixin: ``show()`` displays ``_repr_html_`` (text: ``repr``); later displays do nothing."""

    _shown = False

    def _bundle(self) -> dict[str, Any]:
        return {"text/plain": repr(self), "text/html": self._repr_html_()}

    def _repr_html_(self) -> str:
        raise NotImplementedError

    def show(self, display_id: bool = False) -> Any:
        """Display this object now (once); the display handle when ``display_id`` is set."""
        from IPython.display import display

        self._shown = True
        return display(self._bundle(), raw=True, display_id=display_id or None)

    def _ipython_display_(self) -> None:
        if not self._shown:
            self.show()
