"""ipywidgets views over the practice items: answers appear only after a submit (lab 12).

Three cards, one per item type, each a VBox whose parts are attributes tests drive directly
(``card.box.value = "48"; card.submit_button.click()``):
    DrillCard     a number box; Submit; "Show the answer" (counts as answered, wrong)
    ConceptCard   a text area; Submit; then the key points as check boxes (pre-ticked where the
                  keyword hint spotted them) and "Score my answer"
    CritiqueCard  the candidate's statements with "wrong?" boxes, a box per number to correct
Bad input (not a number, too short an answer) shows a red line and submits nothing. Before a
submit no widget holds any part of the answer: not in a hidden element, not in a tooltip.
The decks (DrillWidget, ConceptWidget, CritiqueWidget) add navigation; ``mock_widget`` is the
timed interview. ``simulate()`` plays a pretend learner (quick mode, tests).
"""

from __future__ import annotations

import html
from typing import Any, Callable, Sequence

import ipywidgets as w

from lab_utils.practice.concepts import Concept, ConceptResult, load_bank
from lab_utils.practice.critiques import Critique, all_critiques
from lab_utils.practice.drills import Drill, DrillSession
from lab_utils.practice.items import shorten

BOX = "border:1px solid #d0d7de;border-radius:6px;padding:8px 12px;margin:4px 0"
RED, GREEN, GREY = "#8a1c1c", "#1a7f37", "#57606a"


def block(text: str, color: str = "") -> str:
    style = f"{BOX};white-space:pre-wrap" + (f";color:{color}" if color else "")
    return f'<div style="{style}">{html.escape(text)}</div>'


def error_html(message: str) -> str:
    return f'<span style="color:{RED}">{html.escape(message)}</span>'


def title(text: str) -> w.HTML:
    return w.HTML(f'<h4 class="lab-widget-title" style="margin:4px 0">{html.escape(text)}</h4>')


class DrillCard(w.VBox):
    def __init__(
        self,
        drill: Drill,
        submit: Callable[[Any], Any],
        give_up: Callable[[], Any] | None = None,
        done: Any = None,
    ):
        self.drill, self._submit, self._give_up = drill, submit, give_up
        self.question = w.HTML(block(drill.prompt))
        self.box = w.Text(
            placeholder=f"your answer, in {drill.unit}", layout=w.Layout(width="240px")
        )
        self.submit_button = w.Button(description="Submit", button_style="primary")
        self.give_up_button = w.Button(description="Show the answer")
        self.error, self.feedback = w.HTML(), w.HTML()
        self.submit_button.on_click(lambda _: self._show(self._submit(self.box.value)))
        self.give_up_button.on_click(
            lambda _: self._show(self._give_up()) if self._give_up else None
        )
        row = [self.box, self.submit_button] + ([self.give_up_button] if give_up else [])
        super().__init__([self.question, w.HBox(row), self.error, self.feedback])
        if done is not None:
            self._show(done)

    def _show(self, r: Any) -> None:
        if r is None:
            return
        if not r.valid:
            self.error.value = error_html(r.message)
            return
        self.error.value = ""
        self.feedback.value = block(str(r), GREEN if r.accepted else RED)
        self.box.disabled = self.submit_button.disabled = self.give_up_button.disabled = True


class ConceptCard(w.VBox):
    def __init__(
        self,
        concept: Concept,
        submit: Callable[[str], ConceptResult],
        grade: Callable[[set[int]], float] | None = None,
        done: ConceptResult | None = None,
    ):
        self.concept, self._submit, self._grade = concept, submit, grade
        self.result: ConceptResult | None = None
        self.question = w.HTML(block(concept.prompt))
        self.text = w.Textarea(
            placeholder="Your answer first (a few sentences), then submit.",
            layout=w.Layout(width="100%", height="110px"),
        )
        self.submit_button = w.Button(description="Submit", button_style="primary")
        self.error, self.feedback, self.score = w.HTML(), w.HTML(), w.HTML()
        self.points: list[w.Checkbox] = []
        self.points_box = w.VBox()
        self.score_button = w.Button(description="Score my answer", layout=w.Layout(display="none"))
        self.submit_button.on_click(lambda _: self._show(self._submit(self.text.value)))
        self.score_button.on_click(self._on_score)
        super().__init__(
            [
                self.question,
                self.text,
                self.submit_button,
                self.error,
                self.feedback,
                self.points_box,
                self.score_button,
                self.score,
            ]
        )
        if done is not None:
            self._show(done)

    def _show(self, r: ConceptResult) -> None:
        if not r.valid:
            self.error.value = error_html(r.message)
            return
        self.result, self.error.value = r, ""
        self.feedback.value = block(str(r))
        self.points = [
            w.Checkbox(value=hint, indent=False, layout=w.Layout(width="28px")) for hint in r.hints
        ]
        rows = [
            w.HBox([cb, w.HTML(f"{i}. {html.escape(p.text)}")])  # each box beside its point
            for i, (cb, p) in enumerate(zip(self.points, self.concept.points), 1)
        ]
        self.points_box.children = [
            w.HTML(
                "<b>Tick what your answer covered (the ticks are "
                "pre-set by a keyword hint; you decide):</b>"
            )
        ] + rows
        self.text.disabled = self.submit_button.disabled = True
        self.score_button.layout.display = ""
        if r.score is not None:
            self._render_score(r.score)

    def _on_score(self, _: Any = None) -> None:
        covered = {i for i, cb in enumerate(self.points, 1) if cb.value}
        value = self._grade(covered) if self._grade else self.result.grade(covered)
        self._render_score(value)

    def _render_score(self, value: float) -> None:
        n = len(self.concept.points)
        self.score.value = f"<b>Self-graded: {round(value * n)} of {n} key points ({value:.0%})</b>"


class CritiqueCard(w.VBox):
    def __init__(
        self, critique: Critique, grade: Callable[[set[int], list], Any], done: Any = None
    ):
        self.critique, self._grade = critique, grade
        c = critique
        statements = "\n".join(f"  {i}. {s.text}" for i, s in enumerate(c.statements, 1))
        self.question = w.HTML(
            block(
                f"[{c.id}] {c.title}  ({c.source}, paraphrased)\n"
                f"{c.setting} A candidate answers:\n{statements}"
            )
        )
        self.flags = [
            w.Checkbox(value=False, description=str(i), indent=False, layout=w.Layout(width="56px"))
            for i in range(1, len(c.statements) + 1)
        ]
        self.numbers = [
            w.Text(placeholder=f"in {d.unit}", layout=w.Layout(width="200px")) for d in c.fixes
        ]
        fixes = [
            w.VBox([w.HTML(f"{chr(97 + j)}) {html.escape(d.question)}"), box])
            for j, (d, box) in enumerate(zip(c.fixes, self.numbers))
        ]
        self.submit_button = w.Button(description="Submit", button_style="primary")
        self.error, self.feedback = w.HTML(), w.HTML()
        self.submit_button.on_click(self._on_submit)
        ask = w.HBox([w.HTML("<i>Tick the wrong statements:</i>&nbsp;"), *self.flags])
        super().__init__(
            [
                self.question,
                ask,
                *([w.HTML("<i>Then correct the numbers:</i>")] + fixes if fixes else []),
                self.submit_button,
                self.error,
                self.feedback,
            ]
        )
        if done is not None:
            self._show(done)

    def _on_submit(self, _: Any = None) -> None:
        wrong = {i for i, f in enumerate(self.flags, 1) if f.value}
        self._show(self._grade(wrong, [b.value for b in self.numbers]))

    def _show(self, r: Any) -> None:
        if not r.valid:
            self.error.value = error_html(r.message)
            return
        self.error.value = ""
        self.feedback.value = block(str(r), GREEN if r.score == 1 else "")
        for widget in (*self.flags, *self.numbers, self.submit_button):
            widget.disabled = True


class DrillWidget(w.VBox):
    """The drill deck: one drill at a time, Next, the running score."""

    def __init__(self, session: DrillSession):
        self.session = session
        self.next_button = w.Button(description="Next drill")
        self.score, self.holder = w.HTML(), w.VBox()
        self.next_button.on_click(lambda _: (self.session.next(), self._render()))
        super().__init__(
            [
                title("Quick-math drills (answers appear after you submit)"),
                self.holder,
                self.next_button,
                self.score,
            ]
        )
        self._render()

    def _submit(self, value: Any) -> Any:
        r = self.session.submit(self.session.index, value)
        self._update_score()
        return r

    def _give_up(self) -> Any:
        r = self.session.give_up(self.session.index)
        self._update_score()
        return r

    def _update_score(self) -> None:
        s = self.session
        self.score.value = (
            f"drill {s.index + 1} of {len(s.drills)}; score {s.correct} of {s.answered} answered"
        )

    def _render(self) -> None:
        s = self.session
        self.card = DrillCard(s.current, self._submit, self._give_up, s.results.get(s.index))
        self.holder.children = [self.card]
        self._update_score()

    def simulate(self, n: int = 3) -> list[str]:
        """A pretend learner answers the first ``n`` drills through the widget (quick mode)."""
        answers = self.session.simulated_answers()
        for i in range(min(n, len(self.session.drills))):
            self.card.box.value = str(answers[self.session.index])
            self.card.submit_button.click()
            self.next_button.click()
        return [d.id for d in self.session.drills[:n]]


class _Picker(w.VBox):
    """A dropdown of items and the card of the chosen one (results kept per item)."""

    def __init__(self, heading: str, items: Sequence[Any], label: Callable[[Any], str]):
        if not items:
            raise ValueError("no items to show")
        self.items = {it.id: it for it in items}
        self.results: dict[str, Any] = {}
        self.picker = w.Dropdown(
            options=[(label(it), it.id) for it in items], layout=w.Layout(width="100%")
        )
        self.holder = w.VBox()
        self.picker.observe(lambda _: self._render(), names="value")
        super().__init__([title(heading), self.picker, self.holder])
        self._render()

    def _keep(self, item_id: str, r: Any) -> Any:
        if r.valid:
            self.results[item_id] = r
        return r

    def _render(self) -> None:
        self.card = self.make_card(self.items[self.picker.value])
        self.holder.children = [self.card]

    def make_card(self, item: Any) -> w.VBox:
        raise NotImplementedError


class ConceptWidget(_Picker):
    def __init__(self, kind: str = "concept", topic: str | None = None):
        items = [c for c in load_bank(kind) if topic in (None, c.topic)]
        if not items:
            raise ValueError(f"no {kind} question has topic {topic!r}")
        heading = (
            "Concept questions" if kind == "concept" else "Production debugging: walk me through it"
        )
        super().__init__(
            f"{heading} (write first, then see the key points)",
            items,
            lambda c: shorten(f"{c.topic}: {c.question}"),
        )

    def make_card(self, item: Concept) -> ConceptCard:
        return ConceptCard(
            item,
            lambda text: self._keep(item.id, item.submit(text)),
            done=self.results.get(item.id),
        )

    def simulate(self, text: str) -> str:
        self.card.text.value = text
        self.card.submit_button.click()
        self.card.score_button.click()
        return self.card.concept.id


class CritiqueWidget(_Picker):
    def __init__(self, items: Sequence[Critique] | None = None):
        super().__init__(
            "Criticise this answer (find the errors, give the right numbers)",
            list(items or all_critiques()),
            lambda c: c.title,
        )

    def make_card(self, item: Critique) -> CritiqueCard:
        return CritiqueCard(
            item,
            lambda wrong, nums: self._keep(item.id, item.grade(wrong, nums)),
            done=self.results.get(item.id),
        )

    def simulate(self) -> str:
        """Flag the first statement and repeat the flawed figure where there is one."""
        self.card.flags[0].value = True
        for box, d in zip(self.card.numbers, self.card.critique.fixes):
            box.value = str(d.mistakes[0].value if d.mistakes else d.answer)
        self.card.submit_button.click()
        return self.card.critique.id


def drill_widget(seed: int = 0, kinds: list[str] | None = None) -> DrillWidget:
    return DrillWidget(DrillSession(seed, kinds))


def concept_widget(kind: str = "concept", topic: str | None = None) -> ConceptWidget:
    return ConceptWidget(kind, topic)


def critique_widget() -> CritiqueWidget:
    return CritiqueWidget()
