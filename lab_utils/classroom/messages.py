"""What a learner may send to the class server, validated and bounded field by field.

Every message is a small JSON object; nothing in it is ever executed or evaluated. A field that is
missing, of the wrong type or too long is refused with a ``BadMessage`` naming that field, so the
notebook (or the instructor reading the server's log) knows what to fix. The only identity kept is
the pseudonym the learner chose: no name, e-mail or address is asked for or stored.
"""

from __future__ import annotations

import math
import re
from typing import Any

MAX_BODY_BYTES = 4096  # one prediction or result is ~300 bytes
PSEUDONYM = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.-]{0,31}")
QUESTION_KEY = re.compile(r"\d{2}\.[a-z0-9_]{1,60}")  # predict()'s "<lab>.<name>"
EXERCISE = re.compile(r"[a-z][a-z0-9_]{0,60}")  # an exercise name (check_<name>)
MAX_TEXT = {"question": 300, "unit": 30, "choice": 60, "misconception": 200}
MAX_CHOICES = 8


class BadMessage(ValueError):
    """A message the server refuses; the text names the field."""


def text(msg: dict, field: str, limit: int, required: bool = True) -> str:
    value = msg.get(field, None if required else "")
    if not isinstance(value, str):
        raise BadMessage(f"{field!r} must be a string, got {type(value).__name__}")
    if len(value) > limit:
        raise BadMessage(f"{field!r} is {len(value)} characters long; at most {limit}")
    return value


def matching(msg: dict, field: str, pattern: re.Pattern, example: str) -> str:
    value = msg.get(field)
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise BadMessage(f"{field!r} must look like {example!r}, got {str(value)[:40]!r}")
    return value


def number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadMessage(f"{field!r} must be a finite number, got {str(value)[:40]!r}")
    return float(value)


def pseudonym(msg: dict) -> str:
    return matching(msg, "pseudonym", PSEUDONYM, "otter-7 (1-32 letters, digits, ' _.-')")


def prediction(msg: dict) -> dict:
    """A committed guess, with what the learner's notebook revealed once it ran (if it has)."""
    choices = msg.get("choices", [])
    if not isinstance(choices, list) or len(choices) > MAX_CHOICES:
        raise BadMessage(f"'choices' must be a list of at most {MAX_CHOICES} strings")
    choices = [text({"choice": c}, "choice", MAX_TEXT["choice"]) for c in choices]
    out = {
        "pseudonym": pseudonym(msg),
        "key": matching(msg, "key", QUESTION_KEY, "05.zero2_bytes"),
        "question": text(msg, "question", MAX_TEXT["question"]),
        "unit": text(msg, "unit", MAX_TEXT["unit"], required=False),
        "choices": choices,
    }
    guess = msg.get("guess")
    if choices or isinstance(guess, str):
        # a multiple-choice guess (predictions.json keeps the guess, not the list of choices)
        out["guess"] = text(msg, "guess", MAX_TEXT["choice"])
        answer = msg.get("answer")
        out["answer"] = None if answer is None else text(msg, "answer", MAX_TEXT["choice"])
        for field in ("guess", "answer"):
            if choices and out[field] is not None and out[field] not in choices:
                raise BadMessage(f"{field!r} must be one of the choices {choices}")
    else:
        out["guess"] = number(guess, "guess")
        for field in ("formula", "measured"):
            out[field] = None if msg.get(field) is None else number(msg[field], field)
    return out


def result(msg: dict) -> dict:
    """An exercise verdict: passed, or the grader's message naming what went wrong."""
    passed = msg.get("passed")
    if not isinstance(passed, bool):
        raise BadMessage(f"'passed' must be true or false, got {str(passed)[:40]!r}")
    return {
        "pseudonym": pseudonym(msg),
        "exercise": matching(msg, "exercise", EXERCISE, "ring_all_reduce"),
        "passed": passed,
        "misconception": "" if passed else text(msg, "misconception", MAX_TEXT["misconception"]),
    }


def question_action(msg: dict) -> dict:
    """What the instructor page asks: open, close, reveal (with a value of the instructor's,
    optionally: a number, or the right choice) or hide a question."""
    action = msg.get("action")
    if action not in ("open", "close", "reveal", "hide"):
        raise BadMessage(f"'action' must be open, close, reveal or hide, got {str(action)[:20]!r}")
    value = msg.get("value")
    if value is not None and action != "reveal":
        raise BadMessage("'value' goes with the reveal action only")
    if value is not None:
        value = (
            text(msg, "value", MAX_TEXT["choice"])
            if isinstance(value, str)
            else number(value, "value")
        )
    return {
        "key": matching(msg, "key", QUESTION_KEY, "05.zero2_bytes"),
        "action": action,
        "value": value,
    }
