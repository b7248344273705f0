"""Drills by id and by seed (``make_drill``, ``make_drills``, ``lookup_drill``) and the deck a
learner answers once each (``DrillSession``, the state behind the drill widget)."""

from __future__ import annotations

import importlib
import random
import re
from dataclasses import replace
from typing import Any

from lab_utils.practice.drills.model import GENERATORS, Drill, DrillResult
from lab_utils.practice.items import with_unit, within


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


def make_drills(
    seed: int = 0, n: int | None = None, kinds: list[str] | None = None, prefix: str = ""
) -> list[Drill]:
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
    if not GENERATORS:  # importing a generator module registers its drills: the deck's order
        for name in ("memory", "performance", "correctness"):  # a loop, so no sorter reorders it
            importlib.import_module(f"lab_utils.practice.drills.{name}")


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
        return [
            {"#": i, "question": d.prompt, "done": "yes" if i in self.results else ""}
            for i, d in enumerate(self.drills)
        ]

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
            return DrillResult(
                "", False, False, i, f"no drill number {i!r}: choose 0 to {len(self.drills) - 1}"
            )
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
            self.results[i] = DrillResult(
                d.id,
                True,
                False,
                None,
                f"Not answered. The answer is {with_unit(d.answer, d.unit)}. {d.explanation}",
            )
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
            out[i] = (
                d.answer
                if pick == 0 or (pick == 1 and not d.mistakes)
                else d.mistakes[0].value
                if pick == 1
                else d.answer * 3
            )
        return out
