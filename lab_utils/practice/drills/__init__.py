"""Quick-math drills for interviews, generated from ``lab_utils.calc`` and graded (lab 12).

    deck = DrillSession(seed=0)           # one drill of every kind, random but reproducible
    deck.show()                           # the questions (with ids), never the answers
    print(deck.submit(0, 544))            # "submitted [drill:...] Correct: ..." or the
                                          # explanation, naming the misconception you fell for
    practice.drill_widget(seed=0)         # the same, as a widget (lab_utils.practice.widgets)

Every answer is computed by the calculators the labs use, so a drill can never disagree with a
lab. Each drill carries ``mistakes``: the answers common misconceptions give (e.g. ZeRO-1 as
8N + 8N/K), so a wrong answer earns a named explanation. A drill is answered once: the answer
is shown only in the result of that submission.

The index of a package, one concept per module:
    model        Drill, Mistake, DrillResult, the generator registry (``@generator(kind)``)
    memory       generators, part 1: memory, checkpoints, communication bytes and time
    performance  generators, part 2: pipelines, Amdahl, MFU, training days and cost, FP8
    session      drills by id and seed, and the deck answered once each (DrillSession)
Modules import each other's modules, never this index; code outside imports the index.
"""

from __future__ import annotations

from lab_utils.practice.drills.model import GENERATORS, Drill, DrillResult, Mistake, generator
from lab_utils.practice.drills.session import (
    DrillSession,
    kinds,
    lookup_drill,
    make_drill,
    make_drills,
)

__all__ = [
    "Drill",
    "DrillResult",
    "DrillSession",
    "GENERATORS",
    "Mistake",
    "generator",
    "kinds",
    "lookup_drill",
    "make_drill",
    "make_drills",
]
