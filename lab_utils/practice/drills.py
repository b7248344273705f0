"""Quick-math drills for interviews, generated from ``lab_utils.calc`` and graded (lab 12).

    deck = DrillSession(seed=0)           # one drill of every kind, random but reproducible
    deck.show()                           # the questions (with ids), never the answers
    print(deck.submit(0, 544))            # "submitted [drill:...] Correct: ..." or the
                                          # explanation, naming the misconception you fell for
    drill_widget(seed=0)                  # the same, as a widget (lab_utils.practice.widgets)

Every answer is computed by the calculators the labs use (``generators``), so a drill can never
disagree with a lab. Each drill carries ``mistakes``: the answers common misconceptions give
(e.g. ZeRO-1 as 8N + 8N/K), so a wrong answer earns a named explanation. A drill is answered
once: the answer is shown only in the result of that submission.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from lab_utils.practice.items import (Secrets, parse_answer, submitted_mark, tag, with_unit,
                                      within)


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
        return Secrets((self.answer,), (self.explanation,) + tuple(m.why for m in self.mistakes),
                       (self.unit,))

    def check(self, value: Any) -> DrillResult:
        """Accept ``value`` within ``tolerance`` of the answer, else explain (naming the
        misconception when the value is one). Never raises: a non-number gives an invalid
        result whose message says what to type."""
        try:
            x = parse_answer(value, self.unit)
        except ValueError as exc:
            return DrillResult(self.id, False, False, value, str(exc))
        if within(x, self.answer, self.tolerance):
            return DrillResult(self.id, True, True, value,
                               f"Correct: {with_unit(self.answer, self.unit)}. {self.explanation}")
        hit = next((m for m in self.mistakes if within(x, m.value, self.tolerance)), None)
        named = f" That is a classic mistake: {hit.why}" if hit else ""
        return DrillResult(self.id, True, False, value,
                           f"Not quite: you said {with_unit(x, self.unit)}; the answer is "
                           f"{with_unit(self.answer, self.unit)}.{named} {self.explanation}",
                           hit.why if hit else "")


GENERATORS: dict[str, Callable[[random.Random], Drill]] = {}


def generator(kind: str) -> Callable[[Callable[[random.Random], Drill]], Callable]:
    """Register a drill generator (rng -> Drill) under ``kind`` (see ``generators``)."""
    def register(fn: Callable[[random.Random], Drill]) -> Callable[[random.Random], Drill]:
        GENERATORS[kind] = fn
        return fn
    return register


def make_drill(kind: str, sub_seed: str) -> Drill:
    """The drill of ``kind`` for ``sub_seed``: the id ``drill:<kind>:<sub_seed>`` rebuilds it."""
    _load_generators()
    if kind not in GENERATORS:
        raise ValueError(f"unknown drill kind {kind!r}; choose from {', '.join(GENERATORS)}")
    d = GENERATORS[kind](random.Random(f"{kind}:{sub_seed}"))
    # a misconception whose number lands next to the answer cannot be told apart: drop it
    kept = tuple(m for m in d.mistakes if not within(m.value, d.answer, 2 * d.tolerance))
    return replace(d, kind=kind, id=f"drill:{kind}:{sub_seed}", mistakes=kept)


def lookup_drill(item_id: str) -> Drill:
    """Rebuild a drill from its id (``drill:<kind>:<sub_seed>``)."""
    m = re.fullmatch(r"drill:([a-z0-9_]+):([a-z]*[0-9.]+)", item_id)
    if not m:
        raise ValueError(f"{item_id!r} is not a drill id (drill:<kind>:<seed>)")
    return make_drill(m.group(1), m.group(2))


def kinds() -> list[str]:
    _load_generators()
    return list(GENERATORS)


def make_drills(seed: int = 0, n: int | None = None, kinds: list[str] | None = None,
                prefix: str = "") -> list[Drill]:
    """Drills for ``seed`` (same seed -> same drills). Default: one of each kind in ``kinds``
    (default: every registered kind); with ``n``, n drills cycling through them. ``prefix``
    (letters) keeps another deck's drills apart from these (the mock interview uses 'm')."""
    if not isinstance(prefix, str) or not re.fullmatch(r"[a-z]*", prefix):
        raise ValueError(f"prefix must be lowercase letters, got {prefix!r}")
    _load_generators()
    kinds = list(GENERATORS) if kinds is None else list(kinds)
    for k in kinds:
        if k not in GENERATORS:
            raise ValueError(f"unknown drill kind {k!r}; choose from {', '.join(GENERATORS)}")
    if not kinds:
        raise ValueError("kinds is empty: name at least one drill kind")
    count = len(kinds) if n is None else n
    return [make_drill(kinds[i % len(kinds)], f"{prefix}{seed}.{i}") for i in range(count)]


def _load_generators() -> None:
    if not GENERATORS:
        from lab_utils.practice import generators, generators_perf  # noqa: F401 (registers)


class DrillSession:
    """A deck of drills answered once each (the widget's state; testable without a browser)."""

    def __init__(self, seed: int = 0, kinds: list[str] | None = None, n: int | None = None):
        self.drills = make_drills(seed, n, kinds)
        self.results: dict[int, DrillResult] = {}
        self.index = 0

    @property
    def current(self) -> Drill:
        return self.drills[self.index % len(self.drills)]

    @property
    def correct(self) -> int:
        return sum(r.accepted for r in self.results.values())

    @property
    def answered(self) -> int:
        return len(self.results)

    def rows(self) -> list[dict]:
        """The questions as table rows: number, id, question, unit, and whether answered."""
        return [{"#": i, "question": d.prompt, "done": "yes" if i in self.results else ""}
                for i, d in enumerate(self.drills)]

    def table(self, title: str = "Quick-math drills (answers hidden until you submit)") -> Any:
        """The questions as a ``viz.Table`` (no answers)."""
        from lab_utils.viz import Table
        return Table(self.rows(), title=title)

    def show(self, title: str = "Quick-math drills (answers hidden until you submit)") -> None:
        """Display the questions (``viz.show_table``); nothing is returned, so a notebook cell
        ending with ``deck.show()`` shows the table once."""
        from lab_utils.viz import show_table
        show_table(self.rows(), title=title)

    def _bad_index(self, i: Any) -> DrillResult | None:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(self.drills):
            return DrillResult("", False, False, i, f"no drill number {i!r}: choose 0 to "
                                                    f"{len(self.drills) - 1}")
        return None

    def submit(self, i: int | None = None, value: Any = None) -> DrillResult:
        """Answer drill ``i`` (default: the current one). Invalid input is not counted; a drill
        answered before keeps its first result (returned again)."""
        i = self.index if i is None else i
        if (bad := self._bad_index(i)) is not None:
            return bad
        if i in self.results:
            return self.results[i]
        result = self.drills[i].check(value)
        if result.valid:
            self.results[i] = result
        return result

    def give_up(self, i: int | None = None) -> DrillResult:
        """Show drill ``i``'s answer without answering: it counts as answered, and wrong."""
        i = self.index if i is None else i
        if (bad := self._bad_index(i)) is not None:
            return bad
        if i not in self.results:
            d = self.drills[i]
            self.results[i] = DrillResult(d.id, True, False, None, f"Not answered. The answer is "
                                          f"{with_unit(d.answer, d.unit)}. {d.explanation}")
        return self.results[i]

    def next(self) -> Drill:
        self.index = (self.index + 1) % len(self.drills)
        return self.current

    def simulated_answers(self) -> dict[int, float]:
        """A pretend learner for quick mode (CI): right, a named misconception, plainly wrong,
        in turn, so every path of the grading is exercised."""
        out = {}
        for i, d in enumerate(self.drills):
            pick = i % 3
            out[i] = (d.answer if pick == 0 or (pick == 1 and not d.mistakes)
                      else d.mistakes[0].value if pick == 1 else d.answer * 3)
        return out


def drill_widget(seed: int = 0, kinds: list[str] | None = None) -> Any:
    """The drills as a widget (``lab_utils.practice.widgets.DrillWidget``)."""
    from lab_utils.practice.widgets import DrillWidget
    return DrillWidget(DrillSession(seed, kinds))
