"""Drill generators, part 3: when two runs must log the same loss (lab 14). Each answer comes
from ``lab_utils.calc`` (equivalence); each drill lists the answers of its misconceptions."""

from __future__ import annotations

import random

from lab_utils.calc import logged_loss
from lab_utils.practice.drills.model import Drill, Mistake, generator
from lab_utils.practice.items import fmt


@generator("loss_equality")
def loss_equality(rng: random.Random) -> Drill:
    n = rng.choice((2, 4))
    while True:  # draw until the misconception's answer is clearly apart from the right one
        counts = sorted(rng.sample(range(16, 513, 16), n), reverse=True)  # real tokens per rank
        means = [round(rng.uniform(1.5, 4.0), 2) for _ in range(n)]  # each rank's mean
        sums = [m * c for m, c in zip(means, counts)]
        ans = logged_loss(sums, counts, "global")
        per_rank = logged_loss(sums, counts, "per_rank")
        if abs(per_rank - ans) > 0.01 * ans:
            break
    ranks = ", ".join(f"{c} tokens at mean {m}" for c, m in zip(counts, means))
    return Drill(
        f"A data-parallel step on {n} ranks with padded batches: the ranks hold {ranks}. "
        "Which loss must the job log so that it equals the single-GPU loss on the same "
        "global batch?",
        ans,
        "nats",
        0.002,
        f"The token-weighted mean, sum of (count x mean) / sum of counts = {fmt(ans)}: "
        "one process averages over every real token at once. The mean of the per-rank "
        f"means, {fmt(per_rank)}, equals it only when every rank holds as many real "
        "tokens (torchtitan PR #2206).",
        params={"counts": counts, "means": means},
        mistakes=(
            Mistake(
                per_rank,
                "the mean of the per-rank means weighs a rank's few tokens like another's many",
            ),
        ),
    )
