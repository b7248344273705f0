"""The timed mock interview as a widget: Start, one item at a time, Next, Finish -> scorecard.

The clock is read at every click (no background thread), so the status line shows the time
left as of the last action. Drive it in tests with ``.start_button.click()``, the card's own
boxes and buttons, ``.next_button.click()`` and ``.finish_button.click()``.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

from lab_utils.practice.concepts import Concept
from lab_utils.practice.drills import Drill
from lab_utils.practice.mock import MockInterview
from lab_utils.practice.widgets import ConceptCard, CritiqueCard, DrillCard, error_html, title

PRETEND_TEXT = (
    "A pretend answer from quick mode: the learner would write a few sentences here "
    "about what is split, what is communicated and what it costs."
)


class MockWidget(w.VBox):
    def __init__(self, mock: MockInterview):
        self.mock = mock
        self.start_button = w.Button(description="Start the clock", button_style="primary")
        self.next_button = w.Button(description="Next question", disabled=True)
        self.finish_button = w.Button(description="Finish and score", disabled=True)
        self.status, self.error, self.result = w.HTML(), w.HTML(), w.HTML()
        self.holder = w.VBox()
        self.card: Any = None
        self.start_button.on_click(self._on_start)
        self.next_button.on_click(self._on_next)
        self.finish_button.on_click(self._on_finish)
        n = len(mock.items)
        intro = (
            f"{n} questions, {mock.minutes:g} minutes. Answer in order; the key points and "
            "worked answers appear after each submit. Answers after the limit score 0."
        )
        super().__init__(
            [
                title("Mock interview"),
                w.HTML(html.escape(intro)),
                w.HBox([self.start_button, self.next_button, self.finish_button]),
                self.status,
                self.error,
                self.holder,
                self.result,
            ]
        )
        self._status()

    def _status(self) -> None:
        m = self.mock
        if m.started_at is None:
            self.status.value = "<i>Press start when you are ready.</i>"
            return
        answered = sum(a.result is not None for a in m.items)
        if m.finished_at is not None:
            self.status.value = (
                f"<b>Finished</b> &middot; answered {answered} of "
                f"{len(m.items)} in {m.elapsed_s / 60:.1f} of {m.minutes:g} min"
            )
            return
        left = m.remaining_s
        clock = (
            f"{int(left // 60)}:{int(left % 60):02d} left"
            if left >= 0
            else f"over time by {int(-left // 60)}:{int(-left % 60):02d}"
        )
        self.status.value = (
            f"<b>Question {m.index + 1} of {len(m.items)}</b> &middot; {clock} "
            f"&middot; answered {answered}"
        )

    def _answer(self, **kwargs: Any) -> Any:
        r = self.mock.answer(**kwargs)
        self._status()
        return r

    def _grade(self, covered: set[int]) -> float:
        value = self.mock.grade(covered)
        self._status()
        return value

    def _render(self) -> None:
        item, done = self.mock.current, self.mock.items[self.mock.index].result
        if isinstance(item, Drill):
            self.card = DrillCard(item, lambda v: self._answer(value=v), done=done)
        elif isinstance(item, Concept):
            self.card = ConceptCard(item, lambda t: self._answer(text=t), self._grade, done)
        else:
            self.card = CritiqueCard(
                item, lambda wr, nums: self._answer(wrong=wr, numbers=nums), done
            )
        self.holder.children = [self.card]
        self.next_button.disabled = self.mock.index >= len(self.mock.items) - 1

    def _on_start(self, _: Any = None) -> None:
        self.mock.start()
        self.start_button.disabled, self.finish_button.disabled = True, False
        self.error.value = ""
        self._render()
        self._status()

    def _settle_card(self) -> None:
        """A concept answered but not scored counts with the ticks on screen (never 0 unseen)."""
        card, slot = self.card, self.mock.items[self.mock.index]
        if (
            isinstance(card, ConceptCard)
            and card.result is not None
            and slot.result is card.result
            and card.result.score is None
        ):
            card.score_button.click()

    def _on_next(self, _: Any = None) -> None:
        self._settle_card()
        self.mock.next()
        self._render()
        self._status()

    def _on_finish(self, _: Any = None) -> None:
        from lab_utils.viz import Table

        m = self.mock
        if m.started_at is None:
            self.error.value = error_html("press start first")
            return
        self._settle_card()
        m.finish()
        table = Table(
            m.scorecard(),
            title=f"Score {m.score:.0%} after {m.elapsed_s / 60:.1f} of {m.minutes:g} minutes",
        )
        self.result.value = table._repr_html_()
        for b in (self.next_button, self.finish_button):
            b.disabled = True
        self.holder.children = []
        self._status()

    def simulate(self) -> float:
        """A pretend learner (quick mode, tests): right on the drills, the pretend text with the
        keyword ticks on concepts, the wrong statements flagged on critiques; then the score."""
        self.start_button.click()
        for i in range(len(self.mock.items)):
            card = self.card
            if isinstance(card, DrillCard):
                card.box.value = str(card.drill.answer)
                card.submit_button.click()
            elif isinstance(card, ConceptCard):
                card.text.value = PRETEND_TEXT
                card.submit_button.click()
                card.score_button.click()
            else:
                for flag, s in zip(card.flags, card.critique.statements):
                    flag.value = s.wrong
                card.submit_button.click()
            if i < len(self.mock.items) - 1:
                self.next_button.click()
        self.finish_button.click()
        return self.mock.score


def mock_widget(seed: int = 0, minutes: float = 30, **counts: int) -> MockWidget:
    """A timed mock interview (``MockInterview(seed, minutes=..., n_drills=..., ...)``)."""
    return MockWidget(MockInterview(seed=seed, minutes=minutes, **counts))
