"""The review widget that ends every lab: ``review_widget(lab="04")``.

A thin ipywidgets view over ``ReviewSession``: the front of a card, a "Show answer" button,
then "I knew it" / "I didn't" (enabled only once the answer is shown), the Leitner box counts
of the selection, a lab filter and a "due cards only" switch. Its state is plain Python
(``.session``, ``.front.value``, ...), so tests drive it with ``button.click()``. Above the
cards, ``.predictions`` shows the learner's committed predictions of the selected lab again
(guess, formula, measured, verdict: ``lab_utils.exercises.prediction_store.history_html``).
"""

from __future__ import annotations

import html
import os
import re
import warnings
from pathlib import Path
from typing import Iterable

import ipywidgets as widgets

from lab_utils.cards.deck import LAB_TITLES, load_deck, normalise_lab
from lab_utils.cards.leitner import N_BOXES, ProgressStore
from lab_utils.cards.session import ReviewSession

CARD_STYLE = (
    "border:1px solid #d0d7de;border-radius:6px;padding:10px 14px;margin:6px 0;"
    "font-size:15px;line-height:1.45"
)
NOTE_STYLE = "color:#8a1c1c;background:#fdecea;padding:6px 10px;border-radius:4px"


def text_html(text: str) -> str:
    """Card text -> safe HTML: escaped, `code` in monospace, line breaks kept."""
    escaped = html.escape(text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped).replace("\n", "<br>")


class ReviewWidget(widgets.VBox):
    """Flashcard review: Show answer -> I knew it / I didn't, Leitner boxes, lab filter."""

    def __init__(
        self,
        lab: str | None = None,
        topics: str | Iterable[str] | None = None,
        progress: str | os.PathLike | None = None,
        due_only: bool = True,
        limit: int | None = None,
        deck_dir: str | Path | None = None,
    ):
        self._topics, self._limit, self._deck_dir = topics, limit, deck_dir
        with warnings.catch_warnings():  # a corrupted progress file: shown in the widget
            warnings.simplefilter("ignore")
            self.store = ProgressStore(progress)
        self.header = widgets.HTML(
            '<h3 class="lab-widget-title" style="margin:4px 0">Flashcards</h3>'
        )
        options = [("All labs", "all")] + [(f"{k} {v}", k) for k, v in LAB_TITLES.items()]
        self.lab = widgets.Dropdown(
            options=options, value="all" if lab is None else normalise_lab(lab), description="Lab"
        )
        self.due_only = widgets.Checkbox(value=due_only, description="due cards only", indent=False)
        self.counts = widgets.HTML()
        self.front = widgets.HTML()
        self.back = widgets.HTML()
        self.status = widgets.HTML()
        self.notice = widgets.HTML()
        self.predictions = widgets.HTML()  # the learner's own guesses of this lab, again
        self.show_button = widgets.Button(description="Show answer", button_style="info")
        self.knew_button = widgets.Button(description="I knew it", button_style="success")
        self.missed_button = widgets.Button(description="I didn't", button_style="warning")
        self.show_button.on_click(lambda _: self._reveal())
        self.knew_button.on_click(lambda _: self._answer(True))
        self.missed_button.on_click(lambda _: self._answer(False))
        self.lab.observe(lambda _: self._restart(), names="value")
        self.due_only.observe(lambda _: self._restart(), names="value")
        super().__init__(
            [
                self.header,
                widgets.HBox([self.lab, self.due_only]),
                self.counts,
                self.notice,
                self.predictions,
                self.front,
                self.back,
                widgets.HBox([self.show_button, self.knew_button, self.missed_button]),
                self.status,
            ]
        )
        self.add_class("lab-cards")
        self._restart()

    def _restart(self) -> None:
        """(Re)build the session for the current filters; answers so far stay recorded."""
        labs = None if self.lab.value == "all" else self.lab.value
        from lab_utils.exercises.prediction_store import history_html

        self.predictions.value = history_html(labs)
        cards = load_deck(labs=labs, topics=self._topics, deck_dir=self._deck_dir)
        self.session = ReviewSession(
            cards, self.store, due_only=self.due_only.value, limit=self._limit
        )
        self._render()

    def _reveal(self) -> None:
        if self.session.current is not None:
            self.session.reveal()
        self._render()

    def _answer(self, knew_it: bool) -> None:
        if self.session.current is not None and self.session.revealed:
            self.session.answer(knew_it)
        self._render()

    def _render(self) -> None:
        s, card = self.session, self.session.current
        counts = s.box_counts()
        self.counts.value = (
            "<small>"
            + " &nbsp;|&nbsp; ".join(
                [f"new {counts['new']}"]
                + [f"box {b}: {counts[str(b)]}" for b in range(1, N_BOXES + 1)]
            )
            + "</small>"
        )
        note = self.store.progress.notice
        self.notice.value = f'<div style="{NOTE_STYLE}">{html.escape(note)}</div>' if note else ""
        self.show_button.disabled = card is None or s.revealed
        self.knew_button.disabled = self.missed_button.disabled = card is None or not s.revealed
        if card is None:
            self.front.value, self.back.value = "", ""
            self.status.value = html.escape(self._finished_text())
            return
        self.front.value = (
            f'<div style="{CARD_STYLE}"><small>lab {card.lab} &middot; '
            f"{html.escape(', '.join(card.topics))}</small><br>"
            f"{text_html(card.front)}</div>"
        )
        if s.revealed:
            src = (
                f"<br><small><i>Source: {html.escape(card.source)}</i></small>"
                if card.source
                else ""
            )
            self.back.value = (
                f'<div style="{CARD_STYLE};background:#f6f8fa">{text_html(card.back)}{src}</div>'
            )
        else:
            self.back.value = ""
        self.status.value = f"Card {s.position + 1} of {len(s.queue)}. {s.summary()}"

    def _finished_text(self) -> str:
        s = self.session
        if not s.cards:
            return "No card matches this filter."
        if s.answered:
            return f"Session done. {s.summary()} Answers are saved in {self.store.path}."
        wait = s.next_due_in()
        return (
            f"No card is due now (the next one in {wait} session(s)). Untick "
            "'due cards only' to practise anyway."
        )


def review_widget(
    lab: str | int | None = None,
    topics: str | Iterable[str] | None = None,
    progress: str | os.PathLike | None = None,
    due_only: bool = True,
    limit: int | None = None,
    deck_dir: str | Path | None = None,
) -> ReviewWidget:
    """The review widget, e.g. ``review_widget(lab="04")`` as the last cell of lab 04.

    ``progress``: the progress file (default $LAB_CARDS_PROGRESS or
    ~/.distributed_labs/cards_progress.json); nothing is written until a card is answered.
    """
    return ReviewWidget(
        lab=lab, topics=topics, progress=progress, due_only=due_only, limit=limit, deck_dir=deck_dir
    )
