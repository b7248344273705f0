"""Critique items, part 1: memory, sizing and scaling claims from ../shared/sources/ (lab 12).

Each item paraphrases a flawed answer from the interview-prep documents the course was built
from (named in ``source``) and computes the right numbers with ``lab_utils.calc``. Part 2
(communication, pipelines, tensor parallelism, operations) is ``bank_parallel``, part 3
(single-device baselines) ``bank_baselines``.
"""

from __future__ import annotations

from functools import lru_cache

from lab_utils.calc import (
    GB,
    activation_bytes_per_layer,
    amdahl_limit,
    amdahl_speedup,
    model_state_memory,
)
from lab_utils.practice.critiques.model import Critique, S, fix
from lab_utils.practice.items import fmt

STATE = (
    "mixed-precision Adam keeps 16 bytes per parameter: bf16 weights (2) and gradients (2), "
    "fp32 master weights (4), Adam's m and v (4 + 4)"
)


def gpt3_on_1000() -> Critique:
    per_gpu = model_state_memory(175e9, "mixed_adam", tp=8, pp=16).total / GB
    idle = 1000 - 8 * 16 * 7
    return Critique(
        "critique:gpt3-1000-a100",
        "A 175B model on 1000 A100s",
        "sources/003 (Day 18), production challenge 1",
        "You have 1000 A100 GPUs of 80 GB. How would you lay out 3D parallelism for a "
        "175B-parameter "
        "model?",
        (
            S(
                "At 2 bytes per parameter the weights alone take about 350 GB.",
                False,
                "175e9 x 2 B = 350 GB is right for the bf16 weights.",
            ),
            S(
                "Tensor parallelism of 8 leaves 350 / 8 = 44 GB per GPU, so the model fits in 80 "
                "GB.",
                True,
                f"Sizing by weights alone: {STATE}, i.e. 2.8 TB here. And with a 16-stage "
                f"pipeline the weights are split 8 x 16 = 128 ways, not 8: the model state is "
                f"{fmt(per_gpu)} GB per GPU, before activations.",
            ),
            S(
                "TP = 8 keeps every tensor-parallel group inside one 8-GPU node.",
                False,
                "Right: TP's per-layer all-reduces need NVLink.",
            ),
            S(
                "PP = 16 cuts the 96 layers into 16 stages of 6 layers across nodes.",
                False,
                "96 / 16 = 6: an even split, and point-to-point traffic tolerates the network.",
            ),
            S(
                "Data parallelism takes the rest: 1000 / (8 x 16) = about 7 replicas, so TP8 x "
                "PP16 x "
                "DP7.",
                True,
                f"8 x 16 x 7 = 896: {idle} GPUs sit idle. Say so, or pick a layout that "
                "uses the GPUs (e.g. keep them as spares, or PP = 8 with DP = 15 on 960).",
            ),
        ),
        (
            fix(
                "gpt3-1000-a100",
                0,
                "Model-state memory per GPU with TP = 8 and PP = 16, no ZeRO",
                per_gpu,
                "GB",
                f"16 B x 175e9 / (8 x 16) = {fmt(per_gpu)} GB (model state only).",
                (43.75, "that is the candidate's figure: bf16 weights only, divided by TP alone."),
                (350 / 128, "bf16 weights only: training keeps 16 B/param, not 2."),
            ),
            fix(
                "gpt3-1000-a100",
                1,
                "GPUs left idle by TP8 x PP16 x DP7 on 1000 GPUs",
                idle,
                "GPUs",
                f"1000 - 8 x 16 x 7 = {idle}.",
                (0, "8 x 16 x 7 is 896, not 1000."),
                tolerance=0.005,
            ),
        ),
        "Size training by model state (16 B/param) plus activations, divide by TP x PP (x DP with "
        "ZeRO), and check that the layout's product is the number of GPUs you use.",
    )


def seventy_b_256() -> Critique:
    plain = model_state_memory(70e9, "mixed_adam", tp=8, pp=4).total / GB
    zero1 = model_state_memory(70e9, "mixed_adam", 1, 8, 8, 4).total / GB
    zero3 = model_state_memory(70e9, "mixed_adam", 3, 8, 8, 4).total / GB
    return Critique(
        "critique:70b-256-state",
        "70B on 256 GPUs: the memory estimate",
        "sources/004 (flashcards), card 71",
        "A 70B model on 32 nodes of 8 A100s (80 GB), laid out as TP = 8, PP = 4, DP = 8. How much "
        "memory does each GPU need for the model?",
        (
            S(
                "TP = 8 inside a node, PP = 4 across nodes and DP = 8 replicas use 8 x 4 x 8 = 256 "
                "GPUs.",
                False,
                "Right.",
            ),
            S(
                "Each GPU computes with 70B / (8 x 4), about 2.2B parameters.",
                False,
                "Right: 2.19B parameters per GPU.",
            ),
            S(
                "That is about 4.4 GB of state per GPU, a small part of 80 GB.",
                True,
                f"4.4 GB is 2 B/param: the bf16 weights only. {STATE}: {fmt(plain)} GB per GPU, or "
                f"{fmt(zero1)} GB with ZeRO-1 over the 8 replicas. Only ZeRO-3 over DP reaches "
                f"{fmt(zero3)} GB, and under a pipeline it re-gathers parameters every "
                f"micro-batch.",
            ),
            S(
                "The data-parallel all-reduce runs over the network between nodes and can overlap "
                "with "
                "the backward pass.",
                False,
                "Right: each replica's stages live on different nodes.",
            ),
        ),
        (
            fix(
                "70b-256-state",
                0,
                "Model state per GPU with TP = 8, PP = 4, no ZeRO",
                plain,
                "GB",
                f"16 B x 70e9 / 32 = {fmt(plain)} GB.",
                (70e9 * 2 / 32 / GB, "the candidate's 4.4 GB: bf16 weights only."),
            ),
            fix(
                "70b-256-state",
                1,
                "The same with ZeRO-1 over the DP = 8 replicas",
                zero1,
                "GB",
                f"(4 + 12/8) B x 70e9 / 32 = {fmt(zero1)} GB (Rajbhandari et al. 2020, Sec. 5).",
                (zero3, "16N/K is ZeRO-3 (FSDP), not ZeRO-1."),
                (
                    (8 + 8 / 8) * 70e9 / 32 / GB,
                    "8N + 8N/K keeps the fp32 master replicated; ZeRO-1 "
                    "shards it with the optimizer state.",
                ),
            ),
        ),
        "Weights are 2 of the 16 bytes per parameter. Quote model state with its ZeRO stage.",
    )


def amdahl_256() -> Critique:
    speed, limit = amdahl_speedup(0.02, 256), amdahl_limit(0.02)
    return Critique(
        "critique:amdahl-256",
        "Amdahl's law on 256 GPUs",
        "sources/004 (flashcards), card 18",
        "State Amdahl's law and what it implies for a training job on 256 GPUs in which 2% of the "
        "work is serial.",
        (
            S(
                "Speedup on N devices is 1 / (s + (1 - s) / N), s the serial fraction.",
                False,
                "Right (Amdahl 1967).",
            ),
            S(
                "With 10% serial work no number of GPUs gives more than 10x.",
                False,
                "Right: the limit is 1/s.",
            ),
            S(
                "With 2% serial work, 256 GPUs reach 50x.",
                True,
                f"50x = 1/s is the limit for infinitely many GPUs; on 256 it is {fmt(speed)}x.",
            ),
            S(
                "That is 78% parallel efficiency.",
                True,
                f"{fmt(speed)} / 256 = {fmt(100 * speed / 256)}%. Even the limit, 50x, would be "
                f"only "
                f"{fmt(100 * limit / 256)}% of 256.",
            ),
        ),
        (
            fix(
                "amdahl-256",
                0,
                "Amdahl speedup at s = 2%, N = 256",
                speed,
                "x",
                f"1 / (0.02 + 0.98 / 256) = {fmt(speed)}x.",
                (limit, "50x is the limit 1/s, reached only as N grows without bound."),
            ),
            fix(
                "amdahl-256",
                1,
                "Parallel efficiency (speedup / N) there",
                100 * speed / 256,
                "%",
                f"{fmt(speed)} / 256 = {fmt(100 * speed / 256)}%.",
                (78.0, "the candidate's 78% matches no formula."),
                (100 * limit / 256, "that divides the limit 1/s by N, not the speedup on N."),
            ),
        ),
        "Compute the speedup at the N you have; 1/s is only the ceiling.",
    )


def sixty_gb_on_8() -> Critique:
    days = 1e12 / (8 * 2000) / 86_400
    naive = 2048 * 4096 * 2  # the candidate's bytes per sequence
    layer = activation_bytes_per_layer(2048, 1, 4096, 32)  # one sequence, one layer, bf16
    return Critique(
        "critique:60gb-ddp-vs-fsdp",
        "A 60 GB model on 8 A100s: DDP or FSDP?",
        "sources/002 (Day 7), question 5",
        "You have 8 A100s of 80 GB. Training takes 60 GB per GPU (parameters, optimizer state and "
        "activations together). Design for the highest throughput.",
        (
            S(
                "With DDP each GPU keeps all 60 GB, leaving 20 GB to grow the batch.",
                False,
                "Given the premise, right.",
            ),
            S(
                "A 2048-token sequence at hidden size 4096 takes 2048 x 4096 x 2 bytes, so 20 GB "
                "hold "
                "about 1.2M elements: a batch of 4 sequences.",
                True,
                f"By that count 20 GB would hold {20 * GB / naive:,.0f} sequences, not 4: the "
                f"units "
                f"are mixed up. And one bf16 vector per token is not what a layer stores: s b h "
                f"(34 + "
                f"5 a s / h) bytes (Korthikanti et al. 2022), {fmt(layer / GB)} GB per sequence "
                f"and "
                f"layer with 32 heads, {fmt(32 * layer / GB)} GB for 32 layers: without "
                f"recomputation "
                "not even one sequence fits in 20 GB.",
            ),
            S(
                "With FSDP the 60 GB drops to 60 / 8 = 7.5 GB per GPU, leaving 72.5 GB for a "
                "larger "
                "batch.",
                True,
                "FSDP shards parameters, gradients and optimizer state, not "
                "activations; the activation part of the 60 GB stays on every GPU.",
            ),
            S(
                "FSDP then fits 3.5x more sequences per step, so it trains 3.5x faster.",
                True,
                "Tokens per step are not tokens per second: once the GPUs are busy, a larger batch "
                "makes steps longer. Throughput is bounded by FLOP/s (MFU); FSDP also sends 1.5x "
                "DDP's "
                "bytes.",
            ),
            S(
                "FSDP moves about 1.5x DDP's bytes per step: two all-gathers and a reduce-scatter.",
                False,
                "Right (Rajbhandari et al. 2020, Sec. 7).",
            ),
            S(
                "At 2,000 tokens/s per GPU, 8 GPUs get through 1 trillion tokens in about 17 "
                "hours.",
                True,
                f"1e12 / 16,000 tokens/s = 6.25e7 s = {fmt(days)} days.",
            ),
        ),
        (
            fix(
                "60gb-ddp-vs-fsdp",
                0,
                "Days to train on 1e12 tokens at 8 x 2,000 tokens/s",
                days,
                "days",
                f"1e12 / (8 x 2000) / 86,400 = {fmt(days)} days.",
                (17 / 24, "the candidate's 17 hours is off by a factor of 1000."),
            ),
            fix(
                "60gb-ddp-vs-fsdp",
                1,
                "Activations of ONE 2048-token sequence in one layer: hidden "
                "4096, 32 heads, bf16, no recomputation, no FlashAttention",
                layer / GB,
                "GB",
                f"s b h (34 + 5 a s / h) = 2048 x 4096 x {layer / naive * 2:g} B = "
                f"{fmt(layer / GB)} GB.",
                (
                    naive / GB,
                    "one bf16 vector per token: a layer keeps about 34 bytes per element "
                    "plus the attention scores.",
                ),
            ),
        ),
        "FSDP saves model state, not activations; size activations per layer with Korthikanti's "
        "formula; judge throughput in tokens per second; check arithmetic with units.",
    )


def seventy_b_64() -> Critique:
    ddp, z3 = (model_state_memory(70e9, "mixed_adam", s, 64).total / GB for s in (0, 3))
    return Critique(
        "critique:70b-64-zero",
        "How much does ZeRO save for 70B on 64 GPUs?",
        "sources/000 (Day 58), question 4",
        "How does ZeRO reduce memory? Give the numbers for a 70B model on 64 GPUs.",
        (
            S(
                "ZeRO-1 shards the optimizer state, ZeRO-2 also the gradients, ZeRO-3 also the "
                "parameters.",
                False,
                "Right.",
            ),
            S(
                "Without ZeRO each GPU needs 280 GB.",
                True,
                f"280 GB is 4 B/param, the fp32 weights alone. {STATE}: {fmt(ddp)} GB.",
            ),
            S(
                "With ZeRO-3 that falls to about 4 GB per GPU, which fits easily.",
                True,
                f"16 B x 70e9 / 64 = {fmt(z3)} GB of model state, plus activations (not sharded) "
                f"and the "
                "gathered layers.",
            ),
        ),
        (
            fix(
                "70b-64-zero",
                0,
                "Model state per GPU without ZeRO",
                ddp,
                "GB",
                f"16 B x 70e9 = {fmt(ddp)} GB.",
                (280.0, "the candidate's 280 GB: 4 B/param."),
            ),
            fix(
                "70b-64-zero",
                1,
                "Model state per GPU with ZeRO-3 over 64 GPUs",
                z3,
                "GB",
                f"{fmt(ddp)} GB / 64 = {fmt(z3)} GB.",
                (4.0, "the candidate's 4 GB."),
                (280 / 64, "280 / 64 starts from 4 B/param."),
            ),
        ),
        "Start from 16 B/param; ZeRO-3 divides it by the data-parallel degree, activations are "
        "extra.",
    )


def ten_b_on_4() -> Critique:
    ms = model_state_memory(10e9, "mixed_adam")
    ddp, adam, fsdp = ms.total / GB, ms.optimizer / GB, ms.total / 4 / GB
    return Critique(
        "critique:10b-ddp-memory",
        "A 10B model with Adam on 4 GPUs",
        "sources/002 (Day 7), question 3",
        "How much memory does each of 4 GPUs need for a 10B model trained with Adam under DDP, and "
        "under FSDP?",
        (
            S("Parameters in 16-bit: 20 GB.", False, "Right: 2 B x 10e9."),
            S("Gradients in 16-bit: 20 GB.", False, "Right."),
            S(
                "Adam's fp32 states: 40 GB.",
                True,
                f"m and v are 4 B each: {fmt(adam)} GB; and the fp32 master weights add 40 GB "
                f"more.",
            ),
            S("So DDP needs 80 GB per GPU.", True, f"{STATE}: {fmt(ddp)} GB."),
            S(
                "FSDP over 4 GPUs divides all of it by 4.",
                False,
                "Right for the model state (activations are extra).",
            ),
        ),
        (
            fix(
                "10b-ddp-memory",
                0,
                "Model state per GPU under DDP",
                ddp,
                "GB",
                f"16 B x 10e9 = {fmt(ddp)} GB.",
                (80.0, "the candidate's 80 GB forgets the fp32 master and half of Adam's state."),
            ),
            fix(
                "10b-ddp-memory",
                1,
                "Adam's m and v alone",
                adam,
                "GB",
                f"(4 + 4) B x 10e9 = {fmt(adam)} GB.",
                (40.0, "the candidate's 40 GB: 4 B/param."),
            ),
            fix(
                "10b-ddp-memory",
                2,
                "Model state per GPU under FSDP on 4 GPUs",
                fsdp,
                "GB",
                f"{fmt(ddp)} GB / 4 = {fmt(fsdp)} GB.",
                (20.0, "80 GB / 4 starts from the wrong total."),
            ),
        ),
        "Count the fp32 master weights: Adam's model state is 16 B/param, not 8.",
    )


@lru_cache(maxsize=None)
def ITEMS() -> tuple[Critique, ...]:  # noqa: N802 (a constant, built on first use)
    return (
        gpt3_on_1000(),
        seventy_b_256(),
        seventy_b_64(),
        ten_b_on_4(),
        sixty_gb_on_8(),
        amdahl_256(),
    )
