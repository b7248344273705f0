"""Lab 14's experiments beside the matrix: resuming on another world size, the health log."""

from __future__ import annotations

from lab_utils.experiments.lab14 import HealthRow, agreement, resume_coverage


def test_resume_by_step_count_repeats_or_skips_and_by_samples_does_not():
    shrink = resume_coverage(64, 2, world_before=4, steps_before=4, world_after=2)
    grow = resume_coverage(64, 2, world_before=2, steps_before=8, world_after=4)
    # 4 -> 2: the new rank 0 skips its first 8 samples (0..14 even) but 16..30 were done: seen
    # twice; 2 -> 4: each new rank skips 8 of ITS samples, half of them never seen before.
    assert (shrink["naive: seen twice"], shrink["naive: never seen"]) == (16, 0)
    assert (grow["naive: seen twice"], grow["naive: never seen"]) == (0, 32)
    for cov in (shrink, grow):
        assert cov["by count: seen twice"] == cov["by count: never seen"] == 0
        assert cov["consumed before the restart"] == 32


def test_agreement_flags_replicas_that_differ():
    rows = [
        HealthRow("x", 0, r, 4.0, 128, 1.5 if r else 1.25, "ab" if r else "cd", 2) for r in range(2)
    ]
    (row,) = agreement(rows)
    assert not row["grad norms agree"] and not row["weights agree"]
    assert row["tokens"] == row["expected tokens"] and row["collectives per rank"] == [2]
