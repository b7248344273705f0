"""Interview practice (lab 12): every answer hidden until the learner submits.

    from lab_utils import practice
    deck = practice.DrillSession(seed=0)      # quick-math drills generated from lab_utils.calc
    deck.show(); print(deck.submit(0, 48))    # graded with a tolerance; misconceptions named
    practice.concept_widget()                 # concept questions: write, submit, tick the rubric
    practice.concept_widget("debug")          # production debugging: "walk me through it"
    practice.critique_widget()                # flawed answers from the sources: find the errors
    practice.mock_widget(seed=0, minutes=30)  # a timed mix of all of them, scored

The index, one concept per module or package (each package has an index of its own):
    items      what every item shares: ids, the submit marker, answer parsing, units
    drills/    numeric drills: the model, two generator modules, the deck (DrillSession)
    concepts   questions with rubrics (``bank/concepts.yaml``, ``bank/debugs.yaml``)
    critiques/ "criticise this answer": the model, three banks, the catalog
    mock       the timed interview (items drawn from the three kinds above)
    widgets    ipywidgets views of one item and of the decks; ``mock_ui`` the interview's view
    leaks      the search that an executed notebook shows no answer before its submit
Imports go one way: items <- drills <- critiques; concepts; mock <- (drills, concepts,
critiques); widgets <- mock_ui. Nothing imports this index but code outside the package (and
``leaks``, for ``lookup``).
"""

from __future__ import annotations

from typing import Any

from lab_utils.practice.concepts import Concept, ConceptResult, concept, load_bank, topics
from lab_utils.practice.critiques import (
    Critique,
    CritiqueResult,
    Statement,
    all_critiques,
    critique,
)
from lab_utils.practice.drills import (
    Drill,
    DrillResult,
    DrillSession,
    Mistake,
    kinds,
    lookup_drill,
    make_drill,
    make_drills,
)
from lab_utils.practice.items import SUBMITTED, Secrets, submitted_mark, tag
from lab_utils.practice.mock import MockInterview


def lookup(item_id: str) -> Any:
    """Any practice item from the id it shows: drill:..., concept:..., debug:..., critique:..."""
    kind = item_id.split(":", 1)[0]
    if kind == "drill":
        return lookup_drill(item_id)
    if kind in ("concept", "debug"):
        return concept(item_id)
    if kind == "critique":
        return critique(item_id.split("/", 1)[0])
    raise ValueError(f"{item_id!r} is not a practice item id (drill:, concept:, debug:, critique:)")


def drill_widget(seed: int = 0, kinds: list[str] | None = None) -> Any:
    from lab_utils.practice.widgets import drill_widget as make

    return make(seed, kinds)


def concept_widget(kind: str = "concept", topic: str | None = None) -> Any:
    from lab_utils.practice.widgets import concept_widget as make

    return make(kind, topic)


def critique_widget() -> Any:
    from lab_utils.practice.widgets import critique_widget as make

    return make()


def mock_widget(seed: int = 0, minutes: float = 30, **counts: int) -> Any:
    from lab_utils.practice.mock_ui import mock_widget as make

    return make(seed, minutes, **counts)


__all__ = [
    "Drill",
    "DrillResult",
    "DrillSession",
    "Mistake",
    "kinds",
    "make_drill",
    "make_drills",
    "lookup_drill",
    "Concept",
    "ConceptResult",
    "concept",
    "load_bank",
    "topics",
    "Critique",
    "CritiqueResult",
    "Statement",
    "all_critiques",
    "critique",
    "MockInterview",
    "lookup",
    "drill_widget",
    "concept_widget",
    "critique_widget",
    "mock_widget",
    "SUBMITTED",
    "Secrets",
    "submitted_mark",
    "tag",
]
