"""Spaced repetition with Leitner boxes, and the progress file that remembers them.

Rules (Leitner 1972, as used by most flashcard apps):
* every card starts in box 1; "I knew it" moves it up one box (at most 5), "I didn't" sends
  it back to box 1;
* a card in box k is due every 2**(k-1) REVIEW SESSIONS: box 1 every session, box 2 every
  2nd, box 3 every 4th, box 4 every 8th, box 5 every 16th. A session is one review (one widget
  at the end of a lab, one ``python -m lab_utils cards`` run) in which at least one card was
  answered. We count sessions, not days, because learners work through the labs in bursts:
  a card should come back after a few reviews, whatever the calendar says.

Progress is a small JSON file, by default ``~/.distributed_labs/cards_progress.json``;
``LAB_CARDS_PROGRESS`` or an explicit path overrides it. Writes are atomic (temporary file +
``os.replace``). A file that cannot be read is never overwritten silently: it is renamed to
``<name>.corrupt-<timestamp>`` and a warning says so, then a fresh progress starts.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

N_BOXES = 5
ENV_VAR = "LAB_CARDS_PROGRESS"
DEFAULT_PATH = Path("~/.distributed_labs/cards_progress.json")
FORMAT_VERSION = 1


def interval(box: int) -> int:
    """Sessions between two reviews of a card in ``box``: 2**(box-1)."""
    if not 1 <= box <= N_BOXES:
        raise ValueError(f"box must be 1..{N_BOXES}, got {box!r}")
    return 2 ** (box - 1)


@dataclass
class CardState:
    """What we remember about one card: its box, the session it was last answered in,
    and how often it was answered / answered right."""

    box: int = 1
    last_session: int = 0
    seen: int = 0
    correct: int = 0


def answer(state: CardState | None, knew_it: bool, session: int) -> CardState:
    """The Leitner transition: right -> next box (max 5), wrong -> box 1."""
    old = state or CardState()
    box = min(old.box + 1, N_BOXES) if knew_it else 1
    return CardState(
        box=box, last_session=session, seen=old.seen + 1, correct=old.correct + int(knew_it)
    )


def sessions_until_due(state: CardState | None, session: int) -> int:
    """0 if the card is due in ``session``; a new card is always due."""
    if state is None or state.seen == 0:
        return 0
    return max(0, state.last_session + interval(state.box) - session)


def is_due(state: CardState | None, session: int) -> bool:
    return sessions_until_due(state, session) == 0


@dataclass
class Progress:
    """All remembered state: ``sessions`` completed (started) so far and a state per card id.
    ``notice`` is a message for the learner (e.g. a corrupted file was set aside)."""

    sessions: int = 0
    cards: dict[str, CardState] = field(default_factory=dict)
    notice: str = ""

    def box_of(self, card_id: str) -> int | None:
        """The card's box, or None for a card never answered."""
        state = self.cards.get(card_id)
        return state.box if state else None

    def box_counts(self, card_ids: Iterable[str]) -> dict[str, int]:
        """{'new': n, '1': n, ..., '5': n} over the given cards."""
        counts = {"new": 0, **{str(b): 0 for b in range(1, N_BOXES + 1)}}
        for cid in card_ids:
            box = self.box_of(cid)
            counts["new" if box is None else str(box)] += 1
        return counts

    def to_json(self) -> dict:
        return {
            "version": FORMAT_VERSION,
            "sessions": self.sessions,
            "cards": {cid: asdict(s) for cid, s in sorted(self.cards.items())},
        }

    @classmethod
    def from_json(cls, data: object) -> "Progress":
        """Parse and validate; any deviation raises ValueError (the caller backs the file up)."""
        if (
            not isinstance(data, dict)
            or type(data.get("version")) is not int
            or data["version"] != FORMAT_VERSION
        ):
            raise ValueError(f"not a version-{FORMAT_VERSION} progress file")
        sessions, raw_cards = data.get("sessions"), data.get("cards")
        if type(sessions) is not int or sessions < 0 or not isinstance(raw_cards, dict):
            raise ValueError("'sessions' must be a whole number and 'cards' a mapping")
        cards = {}
        for cid, raw in raw_cards.items():
            if not isinstance(raw, dict) or set(raw) != set(CardState.__dataclass_fields__):
                raise ValueError(f"card {cid!r}: expected fields box, last_session, seen, correct")
            if (
                not all(
                    isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in raw.values()
                )
                or not 1 <= raw["box"] <= N_BOXES
            ):
                raise ValueError(f"card {cid!r}: bad values {raw}")
            cards[cid] = CardState(**raw)
        return cls(sessions=sessions, cards=cards)


def progress_path(path: str | os.PathLike | None = None) -> Path:
    """The progress file: ``path`` if given, else $LAB_CARDS_PROGRESS, else the default."""
    chosen = path or os.environ.get(ENV_VAR) or DEFAULT_PATH
    return Path(chosen).expanduser()


def load_progress(path: str | os.PathLike | None = None) -> Progress:
    """Read the progress file; a missing file is a fresh start. A corrupted one is renamed
    to ``*.corrupt-<time>`` (kept for the learner) and a warning explains it."""
    p = progress_path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Progress()
    try:
        return Progress.from_json(json.loads(text))
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup, n = p.with_name(f"{p.name}.corrupt-{stamp}"), 1
        while backup.exists():  # two corruptions in one second: never overwrite a backup
            n += 1
            backup = p.with_name(f"{p.name}.corrupt-{stamp}-{n}")
        os.replace(p, backup)
        notice = (
            f"Your flashcard progress file {p} could not be read ({exc}). It was moved "
            f"to {backup} and a fresh progress starts now."
        )
        warnings.warn(notice, stacklevel=2)
        return Progress(notice=notice)


def save_progress(progress: Progress, path: str | os.PathLike | None = None) -> Path:
    """Atomic write: a temporary file in the same folder, then ``os.replace``."""
    p = progress_path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(progress.to_json(), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


class ProgressStore:
    """The progress file, read-modify-written on every answer.

    Re-reading before each write means two notebooks reviewing at once lose no answers
    (each answer updates one card of the latest file). Nothing is written until the first
    answer, so merely displaying a review widget (e.g. when CI runs a notebook) leaves no file.
    """

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = progress_path(path)
        self.progress = load_progress(self.path)
        self.session: int | None = None  # the session number, fixed by the first answer

    @property
    def current_session(self) -> int:
        """The session the next answers belong to (for deciding which cards are due)."""
        return self.session if self.session is not None else self.progress.sessions + 1

    def record(self, card_id: str, knew_it: bool) -> CardState:
        """Apply one answer and save. The first answer of this store opens a new session."""
        latest = load_progress(self.path)
        if latest.notice:
            self.progress.notice = latest.notice
        if self.session is None:
            self.session = latest.sessions + 1
        latest.sessions = max(latest.sessions, self.session)
        latest.cards[card_id] = answer(latest.cards.get(card_id), knew_it, self.session)
        save_progress(latest, self.path)
        latest.notice = self.progress.notice
        self.progress = latest
        return latest.cards[card_id]
