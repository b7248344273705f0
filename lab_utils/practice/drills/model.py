"""What a quick-math drill is: a question, its computed answer and tolerance, the answers of
common misconceptions (``Mistake``), the verdict on one answer (``DrillResult``), and the registry
the generators (``memory``, ``performance``) fill with ``@generator(kind)``."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

from lab_utils.practice.items import Secrets, parse_answer, submitted_mark, tag, with_unit, within


@dataclass(frozen=True)
class Mistake:
    """An answer a known misconception gives, and what is wrong with it."""

    value: float
    why: str


@dataclass(frozen=True)
class DrillResult:
    """Verdict on one answer. ``valid`` is False when the input was not a number (then nothing
    was submitted and ``message`` says what to type); ``mistake`` names a misconception hit."""

    item_id: str
    valid: bool
    accepted: bool
    value: Any
    message: str
    mistake: str = ""

    def __bool__(self) -> bool:
        return self.accepted

    def __str__(self) -> str:
        return f"{submitted_mark(self.item_id)} {self.message}" if self.valid else self.message


@dataclass(frozen=True)
class Drill:
    """One question with its computed answer. ``tolerance`` is RELATIVE (0.02 = 2%)."""

    question: str
    answer: float
    unit: str
    tolerance: float
    explanation: str
    kind: str = ""
    params: dict = field(default_factory=dict)
    mistakes: tuple[Mistake, ...] = ()
    id: str = ""

    @property
    def prompt(self) -> str:
        return f"{tag(self.id)} {self.question} (answer in {self.unit})"

    @property
    def mistake(self) -> float | None:  # the first misconception (kept for old callers)
        return self.mistakes[0].value if self.mistakes else None

    @property
    def mistake_why(self) -> str:
        return self.mistakes[0].why if self.mistakes else ""

    def secrets(self) -> Secrets:
        return Secrets(
            (self.answer,), (self.explanation,) + tuple(m.why for m in self.mistakes), (self.unit,)
        )

    def check(self, value: Any) -> DrillResult:
        """Accept ``value`` within ``tolerance`` of the answer, else explain (naming the
        misconception when the value is one). Never raises: a non-number gives an invalid
        result whose message says what to type."""
        try:
            x = parse_answer(value, self.unit)
        except ValueError as exc:
            return DrillResult(self.id, False, False, value, str(exc))
        if within(x, self.answer, self.tolerance):
            return DrillResult(
                self.id,
                True,
                True,
                value,
                f"Correct: {with_unit(self.answer, self.unit)}. {self.explanation}",
            )
        hit = next((m for m in self.mistakes if within(x, m.value, self.tolerance)), None)
        named = f" That is a classic mistake: {hit.why}" if hit else ""
        return DrillResult(
            self.id,
            True,
            False,
            value,
            f"Not quite: you said {with_unit(x, self.unit)}; the answer is "
            f"{with_unit(self.answer, self.unit)}.{named} {self.explanation}",
            hit.why if hit else "",
        )


GENERATORS: dict[str, Callable[[random.Random], Drill]] = {}


def generator(kind: str) -> Callable[[Callable[[random.Random], Drill]], Callable]:
    """Register a drill generator (rng -> Drill) under ``kind`` (``memory``, ``performance``)."""

    def register(fn: Callable[[random.Random], Drill]) -> Callable[[random.Random], Drill]:
        GENERATORS[kind] = fn
        return fn

    return register
