"""Where committed predictions are kept, and how they come back in a lab's review.

Committed guesses (not quick-mode presets) and, once revealed, their formula, measured value and
verdict live in ``predictions.json`` beside the flashcard progress (``~/.distributed_labs/``;
``LAB_PREDICTIONS`` overrides the path). ``history(lab)`` lists them; ``history_html(lab)`` is the
table the flashcard review widget shows above the cards.
"""

from __future__ import annotations

import html
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from lab_utils.classroom.client import predictions_saved

ENV_PATH = "LAB_PREDICTIONS"
DEFAULT_PATH = Path("~/.distributed_labs/predictions.json")
BOX_STYLE = "border:1px solid #d0d7de;border-radius:6px;padding:8px 12px;margin:4px 0"


def predictions_path() -> Path:
    return Path(os.environ.get(ENV_PATH) or DEFAULT_PATH).expanduser()


def load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (FileNotFoundError, ValueError, OSError):
        return {}


def save(path: Path, data: dict) -> None:
    """Atomic write (temporary file + rename): a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".predictions-")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    predictions_saved(data)  # a live class, if the learner joined one (lab_utils.classroom)


def history(lab: str | None = None) -> list[dict]:
    """The learner's committed predictions (oldest first), of one lab ("05") or all."""
    rows = [dict(key=k, **v) for k, v in load(predictions_path()).items()]
    if lab is not None:
        rows = [r for r in rows if r["key"].split(".", 1)[0] == str(lab).zfill(2)]
    return sorted(rows, key=lambda r: r.get("time", 0))


def plain(v: Any) -> Any:
    """A JSON-safe copy of a revealed value (numbers as float, anything else as text)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


def history_html(lab: str | None = None) -> str:
    """The learner's committed predictions of one lab (or all) as an HTML table: question,
    guess, formula, measured (or the right choice), verdict. Empty string if there are none."""
    rows = history(lab)
    if not rows:
        return ""
    cols = ("question", "guess", "formula", "measured", "answer", "verdict")
    head = "".join(f"<th style='padding:2px 8px;text-align:left'>{c}</th>" for c in cols)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td style='padding:2px 8px'>{html.escape(fmt(r.get(c, '')))}"
            + (f" {html.escape(r.get('unit', ''))}" if c == "guess" and r.get("unit") else "")
            + "</td>"
            for c in cols
        )
        + "</tr>"
        for r in rows
    )
    where = f"lab {str(lab).zfill(2)}" if lab is not None else "every lab"
    return (
        f'<div style="{BOX_STYLE}"><b>Your predictions in {where}</b>, as you committed them '
        f"(before the run) and as they were revealed<table style='margin-top:4px'>"
        f"<tr>{head}</tr>{body}</table></div>"
    )


def fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
