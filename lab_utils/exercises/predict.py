"""Committed predictions: the learner writes a number BEFORE the run, the lab reveals after.

    from lab_utils.exercises import predict
    guess = predict("05.zero2_bytes", "Bytes one rank sends per step under ZeRO-2, as a multiple "
                    "of what it sends under DDP?", unit="x DDP", quick_guess=0.5)
    ...                                           # the run
    guess.reveal(formula=1.0, measured=ratio, why="reduce-scatter + all-gather = one all-reduce")

``predict`` shows a text box (it reads "5/8", "20%", "64 KB", "0.5x": ``typed_guess``) and a
Commit button (Enter commits too); once committed the guess is locked, and shown as plain HTML
that a saved notebook keeps (``predict_view``). ``reveal``
shows the guess next to the formula and the measurement, with how far off the guess was, but
ONLY once a guess is committed: with JupyterLab's Run All the reveal cell runs before anyone has
typed, so it shows "commit your prediction above" and fills itself in at the moment of the commit.

Three ways a guess gets committed:
  * the learner types into the box and presses Commit;
  * the notebook passes ``answer=...`` (a learner who prefers to edit code);
  * quick mode (``LAB_QUICK=1``, the test suite's and CI's mode): ``quick_guess`` is used, and
    the comparison renders at once, so the executed notebook shows the whole flow.

Multiple-choice predictions take ``choices=[...]`` and reveal with ``reveal(answer=...)``.
Committed guesses (not quick-mode presets) are kept in ``predictions.json`` beside the
flashcard progress (``~/.distributed_labs/``; ``LAB_PREDICTIONS`` overrides the path), with the
formula, measurement and verdict once revealed, so the review at the end of each lab (the
flashcard widget, ``lab_utils.cards.review_widget``) shows the learner their guesses again:
``history(lab)``, ``history_html(lab)``.
"""

from __future__ import annotations

import html
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from lab_utils.exercises.predict_view import (
    GREY,
    committed_html,
    show_after_commit,
    show_input,
    show_live,
)
from lab_utils.exercises.prediction_store import BOX_STYLE, fmt, load, plain, predictions_path, save
from lab_utils.exercises.typed_guess import read_guess
from lab_utils.shown import ShownOnce, in_notebook

HIDDEN_NOTE = "Commit your prediction above to see the formula and the measurement."


def quick_mode() -> bool:
    """True in the course's quick mode (the test suite and CI): presets replace typing."""
    return os.environ.get("LAB_QUICK", "0") == "1"


def parse_number(text: str) -> float:
    """'2.5', '1e9', '1,200', '3_000', '5/8', '0.5x' -> float; else ValueError with the reason
    (a guess in a unit: ``typed_guess.read_guess``)."""
    return read_guess(text)


def off_by(guess: float, truth: float) -> str:
    """How far a numeric guess is from the truth, in words a learner can act on."""
    if truth == guess:
        return "exact"
    if truth == 0 or guess == 0 or (truth > 0) != (guess > 0):
        return f"off by {abs(guess - truth):.4g} (absolute)"
    ratio = guess / truth
    if 0.9 <= ratio <= 1.1:
        return f"within {abs(ratio - 1) * 100:.0f}%: well done"
    return f"{ratio:.3g}x the answer" if ratio > 1 else f"{1 / ratio:.3g}x too small"


@dataclass
class Prediction(ShownOnce):
    """One committed-before-reveal prediction. ``value`` is None until committed."""

    key: str
    question: str
    unit: str = ""
    choices: tuple[str, ...] = ()
    value: Any = None
    preset: bool = False  # quick mode's quick_guess, not the learner's
    _listeners: list[Callable[[], None]] = field(default_factory=list, repr=False)

    @property
    def committed(self) -> bool:
        return self.value is not None

    def commit(self, value: Any) -> None:
        """Lock in a guess (a number, or one of ``choices``); raises ValueError if invalid."""
        if self.committed:
            raise ValueError(f"already committed: {self.value!r} (a prediction is made once)")
        if self.choices:
            if value not in self.choices:
                raise ValueError(f"choose one of {list(self.choices)}, not {value!r}")
        else:
            value = read_guess(value, self.unit) if isinstance(value, str) else float(value)
            if not math.isfinite(value):
                raise ValueError(f"not a finite number: {value!r}")
        self.value = value
        if not self.preset:
            store = load(predictions_path())
            store[self.key] = {
                "question": self.question,
                "unit": self.unit,
                "guess": value,
                "time": time.time(),
            }
            save(predictions_path(), store)
        for listener in list(self._listeners):
            listener()

    def comparison(
        self, formula: Any = None, measured: Any = None, answer: Any = None
    ) -> list[dict]:
        """Rows of guess / formula / measured (or the right choice) with the verdict."""
        if self.choices:
            right = answer
            return [
                {
                    "your guess": self.value,
                    "answer": right,
                    "verdict": "right" if self.value == right else "not this time",
                }
            ]
        truth = measured if measured is not None else formula
        row = {"your guess": self.value}
        if formula is not None:
            row["formula"] = formula
        if measured is not None:
            row["measured"] = measured
        row["verdict"] = off_by(float(self.value), float(truth)) if truth is not None else ""
        return [row]

    def reveal(
        self,
        formula: Any = None,
        measured: Any = None,
        answer: Any = None,
        why: str = "",
        show: Any = (),
    ) -> Any:
        """Show guess vs formula vs measured once committed (fills in later if not yet).

        ``measured`` is what the run observed (say what kind: ledger, wire, timer) and
        ``formula`` what theory predicts; the verdict compares the guess with the measurement
        when there is one, else with the formula. ``show``: a table (``viz.Table(...)``, not
        ``show_table``, which displays at once), a figure, or a list of them, that state the
        answer: displayed under the comparison only once a guess is committed (under Run All,
        the commit fills them in place). Returns what it shows (``.value``: its HTML now);
        outside Jupyter the comparison (and each table's text) is printed if committed.
        """
        if self.choices and answer is None:
            raise ValueError("a multiple-choice prediction reveals with answer=...")
        if answer is not None and self.choices and answer not in self.choices:
            raise ValueError(f"answer {answer!r} is not one of {list(self.choices)}")

        def render() -> str:
            if not self.committed:
                return f'<div style="{BOX_STYLE};color:#57606a"><i>{HIDDEN_NOTE}</i></div>'
            rows = self.comparison(formula, measured, answer)
            self._keep_outcome(rows[0])
            return self._html(rows, why)

        def text() -> str:
            if not self.committed:
                return HIDDEN_NOTE
            return _text(self.comparison(formula, measured, answer), self.unit, why)

        shown = Revealed(render)
        if in_notebook():  # plain HTML, redrawn in place by the commit (saved with the notebook)
            held = [plain(v) for v in (formula, measured, answer) if v is not None]
            self._listeners.append(show_live(render, text, {"key": self.key, "values": held}))
            shown._shown = True
        else:
            print(text())
            if self.committed:
                render()  # keeps the outcome now (predictions.json, a live class)
            else:
                self._listeners.append(render)  # keeps it once a guess is committed
        self.after_commit(*(show if isinstance(show, (list, tuple)) else [show]))
        return shown

    def after_commit(self, *items: Any) -> None:
        """Display ``items`` (tables, figures that state the answer) once a guess is committed:
        now if it is; else each waits in an empty output that the commit fills in place, so a
        Run All shows no answer before the learner commits. Outside Jupyter a committed
        prediction's tables are printed."""
        if in_notebook():
            show_after_commit(self, items)
        elif self.committed:
            for item in items:
                if not hasattr(item, "to_plotly_json"):  # a table's text, not a figure's JSON
                    print(item)

    def _keep_outcome(self, row: dict) -> None:
        """Store what the reveal showed next to the learner's guess (not for quick-mode presets)."""
        if self.preset:
            return
        store = load(predictions_path())
        entry = store.get(self.key)
        if not isinstance(entry, dict):
            return
        outcome = {
            k: plain(row[k]) for k in ("formula", "measured", "answer", "verdict") if k in row
        }
        if any(entry.get(k) != v for k, v in outcome.items()):
            entry.update(outcome)
            save(predictions_path(), store)

    def _html(self, rows: list[dict], why: str) -> str:
        unit = (
            f" <span style='color:#57606a'>({html.escape(self.unit)})</span>" if self.unit else ""
        )
        head = "".join(
            f"<th style='padding:2px 10px;text-align:left'>{html.escape(k)}</th>" for k in rows[0]
        )
        body = "".join(
            "<tr>"
            + "".join(
                f"<td style='padding:2px 10px'>{html.escape(fmt(v))}</td>" for v in r.values()
            )
            + "</tr>"
            for r in rows
        )
        preset = f" <i style='color:{GREY}'>(quick mode: a preset guess)</i>" if self.preset else ""
        note = f"<div style='margin-top:4px'>{html.escape(why)}</div>" if why else ""
        return (
            f'<div style="{BOX_STYLE}"><b>{html.escape(self.question)}</b>{unit}{preset}'
            f"<table style='margin-top:4px'><tr>{head}</tr>{body}</table>{note}</div>"
        )

    def _repr_html_(self) -> str:  # what the predict() cell shows once committed
        return committed_html(self)


@dataclass
class Revealed(ShownOnce):
    """What ``reveal`` showed: ``value`` is its HTML as of now (the hidden note until a commit)."""

    render: Callable[[], str]

    @property
    def value(self) -> str:
        return self.render()

    def _repr_html_(self) -> str:
        return self.render()


def _text(rows: list[dict], unit: str, why: str) -> str:
    lines = [" | ".join(f"{k}: {fmt(v)}" for k, v in r.items()) for r in rows]
    return "\n".join(lines + ([why] if why else [])) + (f"  ({unit})" if unit else "")


def predict(
    key: str,
    question: str,
    unit: str = "",
    quick_guess: Any = None,
    choices: Sequence[str] = (),
    answer: Any = None,
) -> Prediction:
    """Ask for a prediction now; reveal it later with ``.reveal(formula=..., measured=...)``.

    key:         "<lab>.<name>", e.g. "05.zero2_bytes": where the guess is kept.
    question:    what to predict, with the quantity and its unit spelled out.
    quick_guess: the guess used in quick mode (tests, CI), where nobody types.
    choices:     for a multiple-choice prediction, the options (shown as buttons).
    answer:      commit at once (a guess typed into the code instead of the box).
    """
    if not isinstance(key, str) or "." not in key or not key.split(".", 1)[0].isdigit():
        raise ValueError(f"key must look like '<lab>.<name>' (e.g. '05.zero2_bytes'), got {key!r}")
    p = Prediction(key, question, unit, tuple(choices))
    if quick_mode() and answer is None:
        if quick_guess is None:
            raise ValueError(f"prediction {key!r} needs a quick_guess for quick mode")
        p.preset = True
        answer = quick_guess
    if answer is not None:
        p.commit(answer)
    if not in_notebook():
        return p
    if p.committed:
        p.show()
    else:  # the input; the commit replaces it with plain HTML (predict_view)
        show_input(p)
        p._shown = True
    return p
