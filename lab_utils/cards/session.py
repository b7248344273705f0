"""One review session: the queue of due cards, reveal, answer. The widget and the terminal
quiz are thin views over this class, so its behaviour is tested once, without either."""

from __future__ import annotations

import random
from typing import Sequence

from lab_utils.cards.deck import Card
from lab_utils.cards.leitner import ProgressStore, sessions_until_due


class ReviewSession:
    """Walk through ``cards``: ``current`` -> ``reveal()`` -> ``answer(knew_it)`` -> next.

    ``due_only``: only cards the Leitner schedule says are due (new cards always are);
    otherwise every card (practice). Order: lowest box first (new cards count as box 1), then
    deck order, or shuffled with ``seed``. ``limit`` caps the number of cards.
    """

    def __init__(
        self,
        cards: Sequence[Card],
        store: ProgressStore,
        due_only: bool = True,
        limit: int | None = None,
        seed: int | None = None,
    ):
        if limit is not None and limit < 1:
            raise ValueError(f"the number of cards must be at least 1, got {limit}")
        self.cards, self.store, self.due_only = list(cards), store, due_only
        self.queue = self._build_queue(limit, seed)
        self.position = 0
        self.revealed = False
        self.answered = 0
        self.known = 0

    def _build_queue(self, limit: int | None, seed: int | None) -> list[Card]:
        session, states = self.store.current_session, self.store.progress.cards
        cards = [
            c
            for c in self.cards
            if not self.due_only or sessions_until_due(states.get(c.id), session) == 0
        ]
        if seed is not None:
            random.Random(seed).shuffle(cards)
        cards.sort(key=lambda c: self.store.progress.box_of(c.id) or 1)  # stable: keeps order
        return cards[:limit]

    @property
    def current(self) -> Card | None:
        """The card on screen, or None when the session is finished."""
        return self.queue[self.position] if self.position < len(self.queue) else None

    @property
    def remaining(self) -> int:
        return len(self.queue) - self.position

    def reveal(self) -> Card:
        if self.current is None:
            raise ValueError("no card left in this session")
        self.revealed = True
        return self.current

    def answer(self, knew_it: bool) -> None:
        """Record the answer to the current card (its back must have been shown) and move on."""
        card = self.current
        if card is None:
            raise ValueError("no card left in this session")
        if not self.revealed:
            raise ValueError("show the answer before saying whether you knew it")
        self.store.record(card.id, knew_it)
        self.answered += 1
        self.known += int(knew_it)
        self.position += 1
        self.revealed = False

    def box_counts(self) -> dict[str, int]:
        """{'new': n, '1'..'5': n} over all cards of this session's selection."""
        return self.store.progress.box_counts(c.id for c in self.cards)

    def next_due_in(self) -> int | None:
        """Sessions until the first card of the selection is due again (None: no cards)."""
        if not self.cards:
            return None
        session = self.store.current_session + (1 if self.answered else 0)
        return min(
            sessions_until_due(self.store.progress.cards.get(c.id), session) for c in self.cards
        )

    def summary(self) -> str:
        if not self.answered:
            return "No card answered yet."
        return (
            f"You knew {self.known} of {self.answered} card(s) "
            f"({100 * self.known / self.answered:.0f}%)."
        )
