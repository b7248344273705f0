"""Critique items, part 3: single-device baselines (precision, accumulation, recomputation,
activation size) from ../shared/sources/ (paraphrased), with the right numbers from
``lab_utils.calc``. Parts 1 and 2 are ``bank_sizing`` and ``bank_parallel``."""

from __future__ import annotations

from functools import lru_cache

from lab_utils.calc import activation_bytes_per_layer, float_gap, model_state_memory, round_to_bits
from lab_utils.practice.critiques.model import Critique, S, fix
from lab_utils.practice.items import fmt

BF16, FP16 = 7, 10  # stored mantissa bits
BF16_MIN = 2.0 ** (2 - 2**7)  # smallest normal: 2^(1 - bias), bias 127 (8 exponent bits)
FP16_MIN = 2.0 ** (2 - 2**4)  # bias 15 (5 exponent bits): 2^-14


def grad_accum() -> Critique:
    kept = (
        100
        * activation_bytes_per_layer(4096, 1, 4096, 32, recompute="full")
        / activation_bytes_per_layer(4096, 1, 4096, 32, flash_attention=True)
    )
    state = [model_state_memory(1, r).total for r in ("mixed_adam", "fp32_adam")]
    seq = activation_bytes_per_layer(2048, 1, 4096, 32) / activation_bytes_per_layer(
        512, 1, 4096, 32
    )
    flash = activation_bytes_per_layer(
        2048, 1, 4096, 32, flash_attention=True
    ) / activation_bytes_per_layer(512, 1, 4096, 32, flash_attention=True)
    return Critique(
        "critique:grad-accum-32x",
        "Batch 32 when only batch 1 fits",
        "sources/002 (Day 7), question 2",
        "Your model fits with a batch of 1, but you need a batch of 32. What can you do?",
        (
            S(
                "Accumulate gradients over 32 micro-batches of 1: the same update as a batch of "
                "32, "
                "when the loss is divided by 32.",
                False,
                "Right (without batch-dependent layers like BatchNorm).",
            ),
            S(
                "But it is 32 times slower.",
                True,
                "The FLOPs per sample are the same; 32 small steps replace one big step that did "
                "not "
                "fit. It is slower only by the lower efficiency of tiny matmuls, not 32x.",
            ),
            S(
                "Activation checkpointing saves about half the activation memory.",
                True,
                f"Full recomputation keeps only each layer's input: about {fmt(kept)}% of the "
                "activations (with FlashAttention), for one extra forward pass.",
            ),
            S("bf16 activations take half the memory of fp32 ones.", False, "Right."),
            S(
                "So switching to bf16 halves the whole footprint: the 74 GB of a large batch "
                "become "
                "37 GB.",
                True,
                f"Mixed precision halves the activations only. With Adam the model "
                f"state stays at {fmt(state[0])} bytes per parameter, as in fp32 "
                f"({fmt(state[1])}): bf16 weights and gradients, plus fp32 master "
                "weights, m and v.",
            ),
            S(
                "Activations are proportional to the sequence length, so sequences 4x shorter "
                "(2048 "
                "-> 512) take 4x less activation memory.",
                True,
                f"Only with FlashAttention ({fmt(flash)}x). A model that stores the s x s "
                f"attention "
                f"scores (5 a s^2 b bytes per layer) saves {fmt(seq)}x (h = 4096, 32 heads).",
            ),
        ),
        (
            fix(
                "grad-accum-32x",
                0,
                "Activations kept per layer with full recomputation, as % of "
                "none (h = 4096, 32 heads, s = 4096, FlashAttention)",
                kept,
                "%",
                f"2 s b h / 34 s b h = {fmt(kept)}%.",
                (50.0, "far more is saved than half."),
            ),
            fix(
                "grad-accum-32x",
                1,
                "Model-state bytes per parameter of mixed-precision Adam, as a "
                "multiple of fp32 Adam's",
                state[0] / state[1],
                "x",
                f"{fmt(state[0])} / {fmt(state[1])} B: the same.",
                (0.5, "bf16 halves activations, not Adam's model state."),
            ),
            fix(
                "grad-accum-32x",
                2,
                "Activations per layer at s = 2048 as a multiple of s = 512, "
                "without FlashAttention (h = 4096, 32 heads, b = 1)",
                seq,
                "x",
                f"s b h (34 + 5 a s / h) at both lengths: {fmt(seq)}x (Korthikanti et al. 2022).",
                (4.0, "linear only once the s x s scores are not stored (FlashAttention)."),
            ),
        ),
        "Accumulation costs no extra FLOPs; recomputation keeps ~2/34 of the activations; bf16 "
        "halves activations, not model state; the scores make activations quadratic in s.",
    )


def bf16_small_grads() -> Critique:
    g = 1.2e-4
    near, gap = round_to_bits(g, BF16), float_gap(g, BF16)
    lower, upper = sorted((near, near - gap if near > g else near + gap))
    apart = (0.000122 - 0.000115) / gap
    at_one = float_gap(1.0, BF16)
    return Critique(
        "critique:bf16-small-grads",
        "Small gradients in bf16",
        "sources/002 (Day 7), question 4; sources/004 (flashcards), card 75",
        "You train in bf16 and some layers have very small gradients that might underflow. What "
        "do you do?",
        (
            S(
                "bf16 keeps only two to three significant decimal digits.",
                False,
                "Right: 8 significant bits (7 stored) are about 2.4 decimal digits.",
            ),
            S(
                "A gradient of 0.00012 is stored as 0.000122 or 0.000115.",
                True,
                f"Its bf16 neighbours are {lower:.5g} and {upper:.5g}; it is stored as {near:.5g}, "
                f"{fmt(100 * abs(near - g) / g)}% off. The two quoted values are {fmt(apart)} gaps "
                "apart: far coarser than bf16.",
            ),
            S(
                "Gradients below about 1e-4 are where bf16's precision problems start: check the "
                "smallest non-zero gradient.",
                True,
                f"bf16 has fp32's 8 exponent bits: its relative step (between 2^-8 and 2^-7) is "
                f"the "
                f"same at 1e-4 as at 1.0, and underflow starts only near {BF16_MIN:.2g}. A small "
                f"gradient is not an imprecise one. fp16 is different: below {FP16_MIN:.2g} it "
                f"loses "
                "bits (subnormals) and then flushes to zero, hence loss scaling.",
            ),
            S(
                "The real danger is the update: lr x grad can be smaller than the smallest "
                "half-precision number, so it rounds to zero unless the weights are kept in fp32.",
                True,
                f"Wrong for bf16, the format in question; right for fp16, where an update "
                f"below 2^-24 is 0 (Micikevicius et al. 2018, Sec. 3.1 gives both reasons). In "
                f"bf16 an update is lost when it is below half the gap between neighbouring "
                f"numbers near the WEIGHT: near 1.0 that gap is {at_one}, so an update of 1e-3 "
                f"vanishes although it is {1e-3 / BF16_MIN:.1e} times the smallest bf16 number.",
            ),
            S(
                "fp32 master weights (and fp32 accumulation of gradients) keep those small "
                "updates.",
                False,
                "Right: what mixed precision does.",
            ),
        ),
        (
            fix(
                "bf16-small-grads",
                0,
                "Gap between 0.00012 and the next larger bf16 number, as % of 0.00012",
                100 * gap / g,
                "%",
                f"2^(floor(log2 x) - 7) = {gap:.4g}: {fmt(100 * gap / g)}% of x.",
                (
                    100 * (0.000122 - g) / g,
                    "0.000122 is not a neighbour: it is about four gaps away.",
                ),
            ),
            fix(
                "bf16-small-grads",
                1,
                "Smallest update that still changes a bf16 weight equal to 1.0 (round to nearest)",
                at_one / 2,
                "",
                f"Half the gap above 1.0: {at_one} / 2 = {at_one / 2}; anything smaller rounds "
                "back to 1.0.",
                (
                    BF16_MIN,
                    "that is the smallest normal bf16 number; the gap near the weight is "
                    "what matters.",
                ),
                (at_one, "the whole gap: rounding to nearest already moves past its middle."),
            ),
        ),
        "In bf16 precision is relative to the number's own size: judge an update by the gap "
        "near the weight, not by the format's smallest value.",
    )


@lru_cache(maxsize=None)
def ITEMS() -> tuple[Critique, ...]:  # noqa: N802 (a constant, built on first use)
    return (grad_accum(), bf16_small_grads())
