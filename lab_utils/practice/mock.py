"""A timed mock interview: a seeded mix of drills, concept questions, debugging walk-throughs
and critiques, answered in order against the clock, then scored (lab 12).

    mock = MockInterview(seed=3, minutes=25)
    mock.start()
    print(mock.current.prompt)
    print(mock.answer(value=48))                     # a drill: a number
    print(mock.answer(text="ZeRO-1 shards ..."))     # a concept / debug item: your text,
    mock.grade(covered={1, 3})                       #   then tick the key points you covered
    print(mock.answer(wrong={2, 3}, numbers=[35]))   # a critique
    mock.show_scorecard()

Scoring: a drill 1 or 0; a critique its score (wrong statements found minus false alarms, plus
right numbers, over the total); a concept the fraction of key points you ticked. A concept
answered but not self-graded when you move on (``next``, ``finish``) is scored from the
keyword hint's ticks, so it never falls to 0 with no way back. ``finish`` stops the clock.
Answers after the time limit are graded and shown, but score 0. ``clock`` is injectable
(tests and quick mode use a fake one), so nothing here depends on wall time.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from lab_utils.practice.concepts import Concept, ConceptResult, load_bank
from lab_utils.practice.critiques import Critique, all_critiques
from lab_utils.practice.drills import Drill, kinds, make_drills
from lab_utils.practice.items import shorten


@dataclass
class Answered:
    """One item of the interview and what happened to it."""

    item: Any
    result: Any = None
    at_s: float | None = None  # seconds after the start

    @property
    def points(self) -> float:
        r = self.result
        if r is None:
            return 0.0
        if isinstance(r, ConceptResult):
            return r.score or 0.0
        return float(r.score) if hasattr(r, "score") else float(r.accepted)


@dataclass
class MockInterview:
    seed: int = 0
    n_drills: int = 3
    n_concepts: int = 2
    n_debug: int = 1
    n_critiques: int = 2
    minutes: float = 30.0
    clock: Callable[[], float] = time.monotonic
    items: list[Answered] = field(default_factory=list)
    started_at: float | None = None
    finished_at: float | None = None
    index: int = 0

    def __post_init__(self) -> None:
        counts = (self.n_drills, self.n_concepts, self.n_debug, self.n_critiques)
        if (
            any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts)
            or sum(counts) == 0
        ):
            raise ValueError("the item counts must be whole numbers >= 0, not all 0")
        if (
            isinstance(self.minutes, bool)
            or not isinstance(self.minutes, (int, float))
            or not 0 < self.minutes <= 600
        ):
            raise ValueError(f"minutes must be a number in (0, 600], got {self.minutes!r}")
        rng = random.Random(f"mock:{self.seed}")
        drawn: list[Any] = (
            make_drills(
                self.seed,
                self.n_drills,
                rng.sample(kinds(), min(self.n_drills, len(kinds()))) or None,
                prefix="m",
            )
            if self.n_drills
            else []
        )
        for bank, n in (
            (load_bank("concept"), self.n_concepts),
            (load_bank("debug"), self.n_debug),
            (all_critiques(), self.n_critiques),
        ):
            if n > len(bank):
                raise ValueError(f"asked for {n} items but the bank has {len(bank)}")
            drawn += rng.sample(list(bank), n)
        rng.shuffle(drawn)
        self.items = [Answered(item) for item in drawn]

    # --- the clock --------------------------------------------------------------------------
    def start(self) -> None:
        if self.started_at is None:
            self.started_at = self.clock()

    @property
    def elapsed_s(self) -> float:
        if self.started_at is None:
            return 0.0
        end = self.clock() if self.finished_at is None else self.finished_at
        return end - self.started_at

    @property
    def remaining_s(self) -> float:
        return self.minutes * 60 - self.elapsed_s

    # --- answering --------------------------------------------------------------------------
    @property
    def current(self) -> Any:
        return self.items[self.index].item

    def answer(
        self, value: Any = None, text: Any = None, wrong: Iterable[int] = (), numbers: Any = ()
    ) -> Any:
        """Answer the current item (a number for a drill, text for a concept or debug item, the
        wrong statements and numbers for a critique). Invalid input is not recorded."""
        if self.started_at is None:
            raise ValueError("press start first: the clock starts with the first question")
        if self.finished_at is not None:
            raise ValueError("the interview is finished: its answers are final")
        slot = self.items[self.index]
        if slot.result is not None:
            return slot.result
        item = slot.item
        if isinstance(item, Drill):
            result = item.check(value)
        elif isinstance(item, Concept):
            result = item.submit(text)
        else:
            result = item.grade(wrong, numbers)
        if result.valid:
            slot.result, slot.at_s = result, self.elapsed_s
        return result

    def grade(self, covered: Iterable[int]) -> float:
        """Self-grade the current concept/debug answer (key point numbers, 1-based)."""
        slot = self.items[self.index]
        if not isinstance(slot.result, ConceptResult):
            raise ValueError("only an answered concept or debug question is self-graded")
        return slot.result.grade(covered)

    def _settle(self) -> None:
        """Score the current concept answer from the keyword hint if it was not self-graded."""
        r = self.items[self.index].result
        if isinstance(r, ConceptResult) and r.valid and r.score is None:
            r.grade({i for i, hint in enumerate(r.hints, 1) if hint})

    def next(self) -> Any:
        self._settle()
        self.index = min(self.index + 1, len(self.items) - 1)
        return self.current

    def finish(self) -> float:
        """Stop the clock (the answers are final); returns the score."""
        if self.started_at is None:
            raise ValueError("press start first: the clock starts with the first question")
        if self.finished_at is None:
            self._settle()
            self.finished_at = self.clock()
        return self.score

    @property
    def finished(self) -> bool:
        return all(a.result is not None for a in self.items)

    # --- the score --------------------------------------------------------------------------
    def in_time(self, a: Answered) -> bool:
        return a.at_s is not None and a.at_s <= self.minutes * 60

    def scorecard(self) -> list[dict]:
        rows = []
        for i, a in enumerate(self.items, 1):
            state = (
                "not answered"
                if a.result is None
                else "after the time limit"
                if not self.in_time(a)
                else "tick your key points"
                if isinstance(a.result, ConceptResult) and a.result.score is None
                else ""
            )
            kind = f"drill ({a.item.kind})" if isinstance(a.item, Drill) else a.item.kind
            text = a.item.title if isinstance(a.item, Critique) else a.item.question
            rows.append(
                {
                    "#": i,
                    "question": shorten(text, 60),
                    "kind": kind,
                    "points": round(a.points if self.in_time(a) else 0.0, 2),
                    "answered at (min)": None if a.at_s is None else round(a.at_s / 60, 1),
                    "note": state,
                }
            )
        return rows

    @property
    def score(self) -> float:
        return sum(a.points for a in self.items if self.in_time(a)) / len(self.items)

    def show_scorecard(self) -> None:
        from lab_utils.viz import show_table

        show_table(
            self.scorecard(),
            title=f"Mock interview: {self.score:.0%} "
            f"({self.elapsed_s / 60:.1f} of {self.minutes:g} min)",
        )
