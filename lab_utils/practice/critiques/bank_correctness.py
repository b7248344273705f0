"""Critique items, part 4: "is the distributed run correct?" (lab 14), from ../shared/sources/
(paraphrased), with the right numbers from ``lab_utils.calc``."""

from __future__ import annotations

from functools import lru_cache

from lab_utils.calc import reduction_bound
from lab_utils.practice.critiques.model import Critique, S, fix
from lab_utils.practice.items import fmt


def loss_goes_down() -> Critique:
    bound = reduction_bound(4096)
    return Critique(
        "critique:loss-goes-down",
        "How do you know the sharded run is correct?",
        "sources/003 (Day 18), challenge 4",
        "You have just sharded a model with TP and DP. How do you convince yourself that the "
        "distributed run is correct?",
        (
            S(
                "The loss goes down just as in the single-GPU run, so the sharding is correct.",
                True,
                "Silent bugs lower the loss too: gradients summed instead of averaged act as a "
                "larger "
                "learning rate; per-rank token means re-weight the data; a rank that skips its "
                "sync "
                "trains on. A loss curve cannot tell these from the right run.",
            ),
            S(
                "If every rank's loss is finite and falling, the gradients were synchronised.",
                True,
                "A rank that never all-reduces still has a finite, falling loss. Compare the "
                "ranks' "
                "gradient norms after the sync, or a fingerprint of their weights: replicas must "
                "agree bit for bit.",
            ),
            S(
                "Dropout masks must be equal across TP ranks where activations are replicated and "
                "differ where they are sharded.",
                False,
                "Right (Megatron's RNG tracker).",
            ),
            S(
                "The real test: the same batches on one GPU must give bitwise the same weights.",
                True,
                "Only the same operations in the same order are bitwise; DP and TP reorder sums. "
                "The test is a bound from the dtype and the reduction size, checked per tensor.",
            ),
            S(
                "A missing reduction shows when the gradient norm is compared across replicas.",
                False,
                "Right: replicas that disagree after the sync missed a reduction.",
            ),
        ),
        (
            fix(
                "loss-goes-down",
                0,
                "Relative rounding bound gamma_n of a float32 sum of 4096 "
                "terms (relative to the sum of the terms' magnitudes)",
                bound,
                "",
                f"n u / (1 - n u) with u = 2^-24: {fmt(bound)} (Higham 2002, Lemma 3.1): the scale "
                "of a correct difference, where bitwise equality asks for 0.",
                (
                    0.0,
                    "0 is bitwise equality: a different order of summation is allowed to differ "
                    "in the last bits.",
                ),
            ),
        ),
        "A decreasing loss is not evidence: compare with a single-process reference within a "
        "derived bound, and compare the ranks with each other.",
    )


@lru_cache(maxsize=None)
def ITEMS() -> tuple[Critique, ...]:  # noqa: N802 (a constant, built on first use)
    return (loss_goes_down(),)
