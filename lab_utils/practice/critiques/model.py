""" "Criticise this answer": a flawed answer, paraphrased from interview-prep material, to grade.

    c = critique("amdahl-256")
    print(c.prompt)                       # the question, the candidate's statements (numbered),
                                          # and the numbers to correct
    r = c.grade(wrong={3, 4}, numbers=[42, 16.4])
    print(r)                              # "submitted [critique:amdahl-256] ..." per statement:
                                          # right or wrong and why; per number: the check

Grading: +1 for each wrong statement you flag, -1 for each right statement you flag (floored at
0), +1 for each corrected number within tolerance; the score is that over (wrong statements +
numbers). The right numbers come from ``lab_utils.calc`` (the ``bank_*`` modules); each number's
``mistakes`` include the flawed answer's own figure, so repeating it is named as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from lab_utils.practice.drills.model import Drill, DrillResult, Mistake
from lab_utils.practice.items import Secrets, parse_answer, submitted_mark, tag


@dataclass(frozen=True)
class Statement:
    """One sentence of the flawed answer: is it wrong, and why (shown after submitting)."""

    text: str
    wrong: bool
    why: str


@dataclass(frozen=True)
class Critique:
    id: str
    title: str
    source: str  # where the flawed claim comes from (a source document, paraphrased)
    setting: str  # the interview question as asked
    statements: tuple[Statement, ...]
    fixes: tuple[Drill, ...]
    lesson: str
    kind: str = "critique"

    @property
    def prompt(self) -> str:
        title = self.title if self.title[-1] in ".?!" else f"{self.title}."
        lines = [f"{tag(self.id)} {title} {self.setting} A candidate answers:"]
        lines += [f"  {i}. {s.text}" for i, s in enumerate(self.statements, 1)]
        lines.append(
            "Which statements are wrong?" + (" Then give the right numbers:" if self.fixes else "")
        )
        lines += [
            f"  {chr(97 + j)}) {d.question}" + (f" (in {d.unit})" if d.unit else "")
            for j, d in enumerate(self.fixes)
        ]
        return "\n".join(lines)

    @property
    def n_wrong(self) -> int:
        return sum(s.wrong for s in self.statements)

    def secrets(self) -> Secrets:
        nums = tuple(d.answer for d in self.fixes)
        texts = (
            tuple(s.why for s in self.statements)
            + (self.lesson,)
            + tuple(d.explanation for d in self.fixes)
        )
        return Secrets(nums, texts, tuple(d.unit for d in self.fixes))

    def grade(
        self, wrong: Iterable[int] = (), numbers: Sequence[Any] | Mapping[int, Any] = ()
    ) -> "CritiqueResult":
        """``wrong``: the statement numbers (1-based, as printed) you think are wrong;
        ``numbers``: your corrected values in the order a), b), ... (a list, or {0: ..., 1: ...};
        None or a missing entry = no answer). Bad input gives an invalid result (nothing is
        submitted) whose message says what to fix; so does an empty one (nothing flagged, no
        number), which would otherwise reveal the answer and lock the item at 0%."""
        n = len(self.statements)
        try:
            flagged = frozenset(wrong)
        except TypeError:
            return CritiqueResult(
                self, False, message=f"wrong must be statement numbers 1..{n}, e.g. {{2, 5}}"
            )
        bad = [
            w for w in flagged if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= n
        ]
        if bad:
            return CritiqueResult(
                self, False, message=f"no statement {bad[0]!r}: they are numbered 1 to {n}"
            )
        try:
            given = dict(numbers) if isinstance(numbers, Mapping) else dict(enumerate(numbers))
        except TypeError:
            return CritiqueResult(
                self,
                False,
                message="numbers must be a list in the order a), b), ... (None where you skip one)",
            )
        given = {
            j: v
            for j, v in given.items()
            if not (v is None or (isinstance(v, str) and not v.strip()))
        }
        if not flagged and not given:
            return CritiqueResult(
                self,
                False,
                message="nothing to submit yet: tick the "
                "statement(s) you think are wrong"
                + (" or give a corrected number" if self.fixes else "")
                + ", then submit",
            )
        extra = [k for k in given if k not in range(len(self.fixes))]
        if extra:
            return CritiqueResult(
                self,
                False,
                message=f"{len(self.fixes)} number(s) to give, got one for position {extra[0]!r}",
            )
        for j, value in given.items():
            try:
                parse_answer(value, self.fixes[j].unit)
            except ValueError as exc:
                return CritiqueResult(self, False, message=f"number {chr(97 + j)}): {exc}")
        checks = tuple(d.check(given[j]) if j in given else None for j, d in enumerate(self.fixes))
        return CritiqueResult(self, True, flagged, checks)


@dataclass(frozen=True)
class CritiqueResult:
    critique: Critique
    valid: bool
    flagged: frozenset[int] = frozenset()
    checks: tuple[DrillResult | None, ...] = ()
    message: str = ""

    @property
    def item_id(self) -> str:
        return self.critique.id

    @property
    def found(self) -> int:
        return sum(
            1 for i, s in enumerate(self.critique.statements, 1) if s.wrong and i in self.flagged
        )

    @property
    def false_alarms(self) -> int:
        return sum(
            1
            for i, s in enumerate(self.critique.statements, 1)
            if not s.wrong and i in self.flagged
        )

    @property
    def numbers_right(self) -> int:
        return sum(1 for c in self.checks if c is not None and c.accepted)

    @property
    def score(self) -> float:
        c = self.critique
        points = max(0, self.found - self.false_alarms) + self.numbers_right
        return points / (c.n_wrong + len(c.fixes))

    def lines(self) -> list[str]:
        c = self.critique
        out = [
            f"{submitted_mark(c.id)} You found {self.found} of {c.n_wrong} wrong statement(s)"
            f"{f' and flagged {self.false_alarms} right one(s)' if self.false_alarms else ''}"
            f"; numbers right: {self.numbers_right} of {len(c.fixes)}; score "
            f"{self.score:.0%}."
        ]
        you = {
            (True, True): "you flagged it: well spotted",
            (True, False): "MISSED",
            (False, True): "you flagged it, but it holds",
            (False, False): "not flagged",
        }
        for i, s in enumerate(c.statements, 1):
            verdict = "WRONG" if s.wrong else "right"
            out.append(f"  {i}. {verdict} ({you[(s.wrong, i in self.flagged)]}) - {s.why}")
        for j, (d, chk) in enumerate(zip(c.fixes, self.checks)):
            text = (
                chk.message if chk is not None else f"no answer given. The answer: {d.explanation}"
            )
            out.append(f"  {chr(97 + j)}) {text}")
        out.append(f"Lesson: {c.lesson}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines()) if self.valid else self.message


# --- builders for the banks: a statement row, a number to correct ------------------------


def fix(
    item: str,
    j: int,
    question: str,
    answer: float,
    unit: str,
    explanation: str,
    *mistakes: tuple[float, str],
    tolerance: float = 0.02,
) -> Drill:
    """A number the learner must correct, graded like a drill (id ``critique:<item>/<j>``)."""
    return Drill(
        question,
        answer,
        unit,
        tolerance,
        explanation,
        kind="critique-fix",
        mistakes=tuple(Mistake(v, why) for v, why in mistakes),
        id=f"critique:{item}/{chr(97 + j)}",
    )


def S(text: str, wrong: bool, why: str) -> Statement:  # noqa: N802 (reads like a table row)
    return Statement(text, wrong, why)
