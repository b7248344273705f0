"""A live status line while ranks run in a notebook: a long cell shows more than ``[*]``.

After ``AFTER_S`` seconds a run displays one line ("[lab_utils] 4 ranks running: 12 s, 1 of 4
done"), rewritten in place about once a second (a display id) and emptied when the run ends: what
stays in the cell is an empty output. Not a carriage return in the printed text: a notebook
overwrites a line the way a terminal does, so a shorter line after "\\r" keeps the longer one's tail
and a bare "\\r" erases nothing.

Only in a notebook kernel a learner watches: not in a script or a test (their output stays as
it was), not in quick mode (the test suite's nbval runs); ``LAB_UTILS_PROGRESS=1`` or ``0``
overrides.
"""

from __future__ import annotations

import os
import sys
from typing import Any

AFTER_S = 2.0


def wanted() -> bool:
    """True in a Jupyter kernel outside quick mode, unless LAB_UTILS_PROGRESS says otherwise."""
    forced = os.environ.get("LAB_UTILS_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    if os.environ.get("LAB_QUICK", "0") == "1" or "IPython" not in sys.modules:
        return False
    return type(sys.modules["IPython"].get_ipython()).__name__ == "ZMQInteractiveShell"


class StatusLine:
    """``tick(elapsed, done)`` while the ranks run, ``clear()`` at the end (also after a
    failure). Does nothing when not ``wanted()``."""

    def __init__(self, world_size: int, enabled: bool | None = None):
        self.world_size = world_size
        self.enabled = wanted() if enabled is None else enabled
        self.text = ""
        self.handle: Any = None

    def tick(self, elapsed_s: float, done: int) -> None:
        if not self.enabled or elapsed_s < AFTER_S:
            return
        text = (
            f"[lab_utils] {self.world_size} ranks running: {elapsed_s:.0f} s, "
            f"{done} of {self.world_size} done"
        )
        if text != self.text:
            self._show(text)

    def clear(self) -> None:
        if self.handle is not None:
            self._show("")

    def _show(self, text: str) -> None:
        from IPython.display import display

        self.text = text
        if self.handle is None:
            self.handle = display({"text/plain": text}, raw=True, display_id=True)
        else:
            self.handle.update({"text/plain": text}, raw=True)
