"""Conceptual questions and debugging walk-throughs, self-graded against key points (lab 12).

    q = concept("zero-stages")
    r = q.submit("ZeRO-1 shards the optimizer state ...")   # your answer FIRST (free text)
    print(r)            # "submitted [concept:zero-stages] ...": the model answer and the key
                        # points, each marked if your text seems to mention it
    r.grade({1, 2, 4})  # YOU tick the key points you covered (1-based): the score

Honest grading: free text cannot be graded by a machine without either false passes or false
failures, so the score is the learner's own tick list against a rubric of key points. A keyword
check offers a first guess per point (regular expressions over the answer), shown as a hint:
it misses paraphrases and can be fooled by listing words, and it never decides the score.

The bank lives in ``bank/*.yaml`` (our own words; sources named per question). ``kind`` is
"concept" (explain an idea) or "debug" (walk through a production problem, in order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import yaml

from lab_utils.practice.items import Secrets, submitted_mark, tag

BANK = Path(__file__).with_name("bank")
MIN_WORDS = 5
KINDS = ("concept", "debug")


@dataclass(frozen=True)
class KeyPoint:
    """One thing a good answer says. ``keywords``: regexes that must ALL match for the hint."""

    text: str
    keywords: tuple[str, ...] = ()

    def mentioned(self, answer: str) -> bool:
        return bool(self.keywords) and all(re.search(k, answer, re.I) for k in self.keywords)


@dataclass(frozen=True)
class Concept:
    id: str
    kind: str
    topic: str
    question: str
    points: tuple[KeyPoint, ...]
    answer: str
    source: str = ""

    @property
    def prompt(self) -> str:
        return f"{tag(self.id)} {self.question}"

    def secrets(self) -> Secrets:
        return Secrets((), (self.answer,) + tuple(p.text for p in self.points))

    def submit(self, text: Any) -> "ConceptResult":
        """Your free-text answer; too short or not text: an invalid result saying why."""
        if not isinstance(text, str) or len(text.split()) < MIN_WORDS:
            words = len(text.split()) if isinstance(text, str) else 0
            return ConceptResult(
                self,
                False,
                str(text),
                (),
                f"write your answer first: at least "
                f"{MIN_WORDS} words (got {words}). Then submit to see the key "
                "points.",
            )
        return ConceptResult(self, True, text, tuple(p.mentioned(text) for p in self.points))


@dataclass
class ConceptResult:
    """What a submission reveals: the model answer and the key points, with keyword hints.
    ``grade`` records the learner's ticks; ``score`` is the fraction of points covered."""

    concept: Concept
    valid: bool
    text: str
    hints: tuple[bool, ...]
    message: str = ""
    covered: frozenset[int] | None = field(default=None)

    @property
    def item_id(self) -> str:
        return self.concept.id

    def grade(self, covered: Iterable[int]) -> float:
        """Tick the key points you covered (1-based numbers as printed); returns the score."""
        if not self.valid:
            raise ValueError("nothing was submitted yet: submit an answer before grading it")
        n = len(self.concept.points)
        try:
            ticks = frozenset(covered)
        except TypeError:
            raise ValueError(f"covered must be point numbers 1..{n}, e.g. {{1, 3}}") from None
        bad = [c for c in ticks if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= n]
        if bad:
            raise ValueError(f"no key point {bad[0]!r}: the points are numbered 1 to {n}")
        self.covered = ticks
        return self.score

    @property
    def score(self) -> float | None:
        return None if self.covered is None else len(self.covered) / len(self.concept.points)

    def lines(self) -> list[str]:
        c = self.concept
        out = [
            f"{submitted_mark(c.id)} Key points (tick those you covered; the marks are a "
            "keyword hint only):"
        ]
        for i, (p, hint) in enumerate(zip(c.points, self.hints), 1):
            out.append(f"  {i}. [{'seems mentioned' if hint else 'not spotted'}] {p.text}")
        out.append(f"Model answer: {c.answer}")
        if c.source:
            out.append(f"Source: {c.source}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines()) if self.valid else self.message


def _parse(entry: dict, kind: str, where: str) -> Concept:
    for key in ("id", "topic", "question", "points", "answer"):
        if key not in entry:
            raise ValueError(f"{where}: entry {entry.get('id', '?')!r} misses {key!r}")
    points = []
    for p in entry["points"]:
        kws = tuple(p.get("keywords", ()))
        for k in kws:
            re.compile(k)  # a bad regex fails loudly at load time
        points.append(KeyPoint(" ".join(p["text"].split()), kws))
    if len(points) < 2:
        raise ValueError(f"{where}: {entry['id']!r} needs at least 2 key points")
    return Concept(
        f"{kind}:{entry['id']}",
        kind,
        entry["topic"],
        " ".join(entry["question"].split()),
        tuple(points),
        " ".join(entry["answer"].split()),
        entry.get("source", ""),
    )


@lru_cache(maxsize=None)
def load_bank(kind: str = "concept") -> tuple[Concept, ...]:
    """Every question of ``kind`` ('concept' or 'debug') from ``bank/<kind>s.yaml``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    path = BANK / f"{kind}s.yaml"
    items = tuple(_parse(e, kind, path.name) for e in yaml.safe_load(path.read_text())["items"])
    ids = [c.id for c in items]
    if len(set(ids)) != len(ids):
        raise ValueError(
            f"{path.name}: duplicate ids {sorted({i for i in ids if ids.count(i) > 1})}"
        )
    return items


def concept(item_id: str) -> Concept:
    """One question by id: 'zero-stages', 'concept:zero-stages' or 'debug:hang-at-step-n'."""
    kind, _, short = item_id.rpartition(":")
    for k in (kind,) if kind else KINDS:
        for c in load_bank(k):
            if c.id == f"{k}:{short}":
                return c
    raise ValueError(f"no question {item_id!r}; see practice.load_bank('concept') / ('debug')")


def topics(kind: str = "concept") -> list[str]:
    return sorted({c.topic for c in load_bank(kind)})
