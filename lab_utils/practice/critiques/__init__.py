""" "Criticise this answer": a flawed answer, paraphrased from interview-prep material, to grade.

    c = critique("amdahl-256")
    print(c.prompt)                       # the question, the candidate's statements (numbered),
                                          # and the numbers to correct
    r = c.grade(wrong={3, 4}, numbers=[42, 16.4])
    print(r)                              # "submitted [critique:amdahl-256] ..." per statement

The index of a package, one concept per module:
    model           Statement, Critique, CritiqueResult (the grading), and the bank builders
                    ``S`` (a statement row) and ``fix`` (a number to correct, graded as a drill)
    bank_sizing     items, part 1: memory, sizing and scaling claims
    bank_parallel   items, part 2: communication, pipelines, tensor parallelism, operations
    bank_baselines  items, part 3: single-device baselines
    catalog         every item (``all_critiques``) and one by id (``critique``)
Modules import each other's modules, never this index; code outside imports the index.
"""

from __future__ import annotations

from lab_utils.practice.critiques.catalog import all_critiques, critique
from lab_utils.practice.critiques.model import Critique, CritiqueResult, Statement

__all__ = ["Critique", "CritiqueResult", "Statement", "all_critiques", "critique"]
