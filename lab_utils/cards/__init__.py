"""Flashcards: review each lab's ideas and numbers with spaced repetition (every lab).

    load_deck(labs=None, topics=None) -> list[Card]   the validated deck (deck/*.yaml)
    review_widget(lab="04")                           the widget that ends each lab
    cli_main(argv) -> int                             `python -m lab_utils cards ...`

The deck is data: one YAML file per lab. Every number on a card is computed by
``lab_utils.calc`` through a whitelisted resolver (``resolver.py``), so the cards and the labs
can never disagree. Leitner boxes (``leitner.py``): right -> next box, wrong -> box 1; box k
comes back every 2**(k-1) review sessions. Progress lives in a JSON file
(``~/.distributed_labs/cards_progress.json``, or $LAB_CARDS_PROGRESS, or an explicit path).
"""

from __future__ import annotations

from typing import Any

from lab_utils.cards.deck import (
    LAB_TITLES,
    MISCONCEPTIONS,
    Card,
    DeckError,
    check_deck,
    counts_by_lab,
    load_deck,
)
from lab_utils.cards.leitner import (
    CardState,
    Progress,
    ProgressStore,
    answer,
    interval,
    is_due,
    load_progress,
    progress_path,
    save_progress,
)
from lab_utils.cards.quiz import cli_main
from lab_utils.cards.session import ReviewSession


def review_widget(*args: Any, **kwargs: Any) -> Any:
    """``ReviewWidget`` for a lab: see ``lab_utils.cards.widget.review_widget``. Imported
    lazily so the terminal quiz does not load ipywidgets."""
    from lab_utils.cards.widget import review_widget as build

    return build(*args, **kwargs)


__all__ = [
    "Card",
    "DeckError",
    "load_deck",
    "check_deck",
    "counts_by_lab",
    "LAB_TITLES",
    "MISCONCEPTIONS",
    "CardState",
    "Progress",
    "ProgressStore",
    "answer",
    "interval",
    "is_due",
    "load_progress",
    "save_progress",
    "progress_path",
    "ReviewSession",
    "review_widget",
    "cli_main",
]
