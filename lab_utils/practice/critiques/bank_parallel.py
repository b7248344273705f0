"""Critique items, part 2: communication, pipelines, tensor parallelism, activations and
operations, from ../shared/sources/ (paraphrased), with the right numbers from
``lab_utils.calc``."""

from __future__ import annotations

from functools import lru_cache

from lab_utils.calc import (
    GB,
    MB,
    activation_bytes_per_layer,
    bubble,
    collective_time,
    dp_bytes_per_rank,
    model_state_memory,
    peak_in_flight,
    time_to_train,
    tp_layer_comm,
)
from lab_utils.practice.critiques.model import Critique, S, fix
from lab_utils.practice.items import fmt


def ring_latency() -> Critique:
    ring = 1e3 * collective_time("all_reduce", 1024, 0, 5e-6, 50e9)
    tree = 1e3 * collective_time("all_reduce", 1024, 0, 5e-6, 50e9, "tree")
    return Critique(
        "critique:ring-latency",
        "The cost of DDP's all-reduce",
        "sources/000 (Day 58), question 5",
        "What does gradient synchronisation cost in DDP, and in FSDP?",
        (
            S(
                "Each rank sends about twice the gradient size per step, whatever the number of "
                "GPUs.",
                False,
                "Right: 2(N-1)/N x D.",
            ),
            S(
                "With a ring all-reduce the latency grows as O(log N).",
                True,
                f"A ring takes 2(N-1) sequential steps: latency linear in N ({fmt(ring)} ms of "
                f"pure "
                f"latency at N = 1024 and 5 us per step). Tree algorithms get log N ({fmt(tree)} "
                f"ms).",
            ),
            S(
                "FSDP sends about 3x the model size per step, 1.5x DDP.",
                False,
                "Right: two all-gathers and a reduce-scatter of the parameters' size.",
            ),
            S(
                "Overlapping communication with the backward pass hides much of it.",
                False,
                "Right.",
            ),
        ),
        (
            fix(
                "ring-latency",
                0,
                "Latency term (alpha only) of a ring all-reduce over 1024 ranks at 5 us per step",
                ring,
                "ms",
                f"2 x 1023 x 5 us = {fmt(ring)} ms.",
                (tree, "2 log2(N) steps is a tree (Rabenseifner) all-reduce, not a ring."),
            ),
        ),
        "Ring: bandwidth term flat in N, latency term linear in N; trees trade the other way.",
    )


def zero2_comm() -> Critique:
    ratio = dp_bytes_per_rank(2e9, 64, "zero2") / dp_bytes_per_rank(2e9, 64, "ddp")
    return Critique(
        "critique:zero2-halves-comm",
        "Does ZeRO-2 communicate less than DDP?",
        "sources/004 (flashcards), cards 5, 11, 62, 66, 67",
        "Compare the communication of ZeRO-2 with DDP's.",
        (
            S("An all-reduce is a reduce-scatter followed by an all-gather.", False, "Right."),
            S(
                "ZeRO-2 only needs a reduce-scatter of the gradients: half of DDP's all-reduce.",
                True,
                "After each rank updates its shard, the updated parameters must be all-gathered: "
                "reduce-scatter + all-gather, the same bytes as DDP's all-reduce.",
            ),
            S(
                "So ZeRO-2 is a free communication saving over DDP.",
                True,
                "The free part is memory; the bytes are equal (Rajbhandari et al. 2020, Sec. 7).",
            ),
            S("ZeRO-3 / FSDP sends about 1.5x DDP's bytes.", False, "Right."),
        ),
        (
            fix(
                "zero2-halves-comm",
                0,
                "Bytes a ZeRO-2 rank sends per step, as a multiple of DDP's",
                ratio,
                "x",
                "reduce-scatter (N-1)/N P + all-gather (N-1)/N P = 2(N-1)/N P: 1x.",
                (0.5, "the all-gather of the updated parameters is missing."),
            ),
        ),
        "ZeRO-1/2 send DDP's bytes per step without accumulation; with A accumulation "
        "micro-batches ZeRO-2 sends (A+1)/2 x DDP with no_sync (ZeRO-1 stays at 1x); ZeRO-3 1.5x.",
    )


def zero_formulas() -> Critique:
    z1, z2 = (model_state_memory(7e9, "mixed_adam", s, 8).total / GB for s in (1, 2))
    master = "the fp32 master weights are optimizer state: ZeRO-1 shards them with m and v"
    return Critique(
        "critique:zero-formulas",
        "Model state per GPU under ZeRO",
        "sources/004 (flashcards), card 62",
        "Give the model state per GPU for DDP and ZeRO-1/2/3 with K data-parallel GPUs (N "
        "parameters, mixed-precision Adam).",
        (
            S("DDP: 16N.", False, "Right."),
            S("ZeRO-1: 8N + 8N/K.", True, f"4N + 12N/K: {master}."),
            S("ZeRO-2: 6N + 10N/K.", True, "2N + 14N/K: only the bf16 weights stay replicated."),
            S("ZeRO-3 / FSDP: 16N/K.", False, "Right."),
        ),
        (
            fix(
                "zero-formulas",
                0,
                "ZeRO-1 per GPU, 7B model, K = 8",
                z1,
                "GB",
                f"(4 + 12/8) x 7 = {fmt(z1)} GB.",
                (63.0, "9N: the candidate's 8N + 8N/K."),
            ),
            fix(
                "zero-formulas",
                1,
                "ZeRO-2 per GPU, 7B model, K = 8",
                z2,
                "GB",
                f"(2 + 14/8) x 7 = {fmt(z2)} GB.",
                (50.75, "7.25N: the candidate's 6N + 10N/K."),
            ),
        ),
        "ZeRO-1 = 4N + 12N/K, ZeRO-2 = 2N + 14N/K (Rajbhandari et al. 2020, Sec. 5).",
    )


def one_f_one_b_bubble() -> Critique:
    g, o = bubble("gpipe", 4, 8), bubble("1f1b", 4, 8)
    return Critique(
        "critique:1f1b-bubble",
        "What 1F1B buys",
        "sources/003 (Day 18), question 3",
        "What is the pipeline bubble and how do schedules reduce it?",
        (
            S(
                "Stages idle while the pipeline fills at the start of a step and drains at the "
                "end.",
                False,
                "Right.",
            ),
            S(
                "More micro-batches per step make it a smaller share of the step.",
                False,
                "Right: (p-1)/(m+p-1).",
            ),
            S(
                "1F1B alternates forwards and backwards, which keeps the GPUs busier than GPipe: a "
                "smaller bubble.",
                True,
                "1F1B has exactly GPipe's bubble; it limits the micro-batches "
                "in flight, i.e. activation memory.",
            ),
            S(
                "1F1B holds at most p micro-batches of activations on the first stage, GPipe all "
                "m.",
                False,
                "Right.",
            ),
        ),
        (
            fix(
                "1f1b-bubble",
                0,
                "1F1B's bubble as a multiple of GPipe's (p = 4, m = 8)",
                o.of_total / g.of_total,
                "x",
                "(p-1)/(m+p-1) for both: 1x.",
                (0.5, "1F1B does not shrink the bubble."),
            ),
            fix(
                "1f1b-bubble",
                1,
                "That bubble as a share of the step",
                100 * o.of_total,
                "%",
                f"3 / 11 = {fmt(100 * o.of_total)}%.",
                (100 * o.of_ideal, "(p-1)/m is relative to the ideal compute time, not the step."),
            ),
        ),
        "1F1B changes memory, not the bubble; more micro-batches, interleaving or zero-bubble "
        "schedules shrink the bubble.",
    )


def interleaving() -> Critique:
    ratio = peak_in_flight("interleaved", 8, 16, 0, 2) / peak_in_flight("1f1b", 8, 16, 0)
    inter, plain = bubble("interleaved", 8, 16, 2), bubble("1f1b", 8, 16)
    grow = peak_in_flight("1f1b", 4, 16, 0) / peak_in_flight("1f1b", 4, 4, 0)
    return Critique(
        "critique:interleaved-gpipe",
        "GPUs idle half the time in a pipeline",
        "sources/000 (Day 58), production challenge 3",
        "With pipeline parallelism the GPUs sit idle half of the time. What do you do?",
        (
            S("The cause is too few micro-batches per step.", False, "Likely: (p-1)/(m+p-1)."),
            S("Raise the micro-batches per step, e.g. from 4 to 16.", False, "Right."),
            S(
                "Use an interleaved pipeline schedule such as GPipe or PipeDream.",
                True,
                "GPipe is the plain fill-and-drain schedule. Interleaving is Megatron's "
                "interleaved "
                "1F1B: v model chunks per rank, the bubble / v, at v times the stage-to-stage "
                "messages "
                "and more activation memory.",
            ),
            S(
                "The trade-off: more micro-batches need more activation memory.",
                True,
                "Only for GPipe. With 1F1B the first stage holds min(p, m) micro-batches, whatever "
                "m.",
            ),
        ),
        (
            fix(
                "interleaved-gpipe",
                0,
                "Interleaved 1F1B (p = 8, v = 2, m = 16): first stage's peak "
                "activations as a multiple of 1F1B's",
                ratio,
                "x 1F1B",
                f"1 + (p-1)/(p v) = {fmt(ratio)}x (Korthikanti et al. 2022, Sec. 4).",
                (1.0, "interleaving holds more than 1F1B, not the same."),
            ),
            fix(
                "interleaved-gpipe",
                1,
                "Its bubble as a share of the step",
                100 * inter.of_total,
                "%",
                f"(p-1)/v slots of m: {fmt(100 * inter.of_total)}% of the step.",
                (
                    100 * plain.of_total,
                    "that is plain 1F1B's bubble; interleaving divides it by v.",
                ),
            ),
            fix(
                "interleaved-gpipe",
                2,
                "1F1B, p = 4: first stage's peak activations at m = 16, as a multiple of m = 4",
                grow,
                "x",
                "min(p, m) = 4 in both cases: 1x.",
                (4.0, "that grows with m like GPipe; 1F1B does not."),
            ),
        ),
        "Interleaving trades memory and messages for a smaller bubble; 1F1B decouples memory from "
        "m.",
    )


def sequence_parallel() -> Critique:
    comm = [
        tp_layer_comm(1, 4096, 8192, 8, sequence_parallel=sp).bytes_per_rank for sp in (True, False)
    ]
    act = [
        activation_bytes_per_layer(4096, 1, 8192, 64, 8, sp, "selective") for sp in (True, False)
    ]
    return Critique(
        "critique:sp-reduces-comm",
        "Tensor parallelism is communication-bound",
        "sources/000 (Day 58), production challenge 4; sources/003 (Day 18), question 5",
        "Tensor parallelism is slower than expected because of communication. What would you do?",
        (
            S(
                "Lower the TP degree, e.g. from 8 to 4.",
                False,
                "A fair trade: fewer ranks per all-reduce, bigger matmuls, more memory.",
            ),
            S("Keep every TP group inside one node, on NVLink.", False, "Right."),
            S(
                "Turn on sequence parallelism: sharding the sequence reduces the communication.",
                True,
                "Sequence parallelism replaces each all-reduce by a reduce-scatter and an "
                "all-gather: "
                "the same bytes (Megatron adds a re-gather in the backward). It saves activation "
                "memory.",
            ),
            S(
                "Sequence parallelism means passing key/value blocks around a ring so each GPU "
                "attends "
                "its own queries to all keys.",
                True,
                "That is ring attention, a form of context "
                "parallelism. Megatron's sequence parallelism "
                "shards the LayerNorm and dropout regions inside "
                "the TP group.",
            ),
        ),
        (
            fix(
                "sp-reduces-comm",
                0,
                "TP bytes per rank per layer with SP, as a multiple of without (t = 8)",
                comm[0] / comm[1],
                "x",
                "Same bytes per collective: 1x (Korthikanti et al. 2022, Sec. 4.2).",
                (0.5, "SP does not halve TP's traffic."),
            ),
            fix(
                "sp-reduces-comm",
                1,
                "Activations per layer with SP, as a multiple of without (t = 8, "
                "selective recomputation)",
                act[0] / act[1],
                "x",
                f"(34/8) / (10 + 24/8) = {fmt(act[0] / act[1])}x: SP's gain is memory.",
                (1.0, "SP does change activation memory: it shards the replicated part."),
            ),
        ),
        "SP is a memory technique with TP's communication volume; CP (ring attention) is another "
        "thing.",
    )


def two_allreduces() -> Critique:
    comm = tp_layer_comm(1, 4096, 8192, 8)
    mb = comm.bytes_per_rank / MB
    return Critique(
        "critique:tp-two-allreduces",
        "How much does Megatron's TP communicate?",
        "sources/003 (Day 18), question 4",
        "How does Megatron-LM keep tensor-parallel communication low in a transformer layer?",
        (
            S(
                "A column-parallel linear followed by a row-parallel one needs no communication in "
                "between.",
                False,
                "Right.",
            ),
            S(
                "So a transformer layer needs only 2 all-reduces.",
                True,
                "2 in the forward pass; the backward adds 2 (the input gradients): 4 per layer per "
                "micro-batch, 6 with full recomputation.",
            ),
            S(
                "Each all-reduce carries an activation of batch x sequence x hidden.",
                False,
                "Right.",
            ),
        ),
        (
            fix(
                "tp-two-allreduces",
                0,
                "All-reduces per layer per micro-batch, forward and backward",
                4,
                "all-reduces",
                "2 forward + 2 backward = 4.",
                (2, "forward only."),
                tolerance=0.01,
            ),
            fix(
                "tp-two-allreduces",
                1,
                "Bytes one rank sends per layer per micro-batch: b = 1, "
                "s = 4096, h = 8192, t = 8, bf16",
                mb,
                "MB",
                f"4 x 2 x 7/8 x {fmt(comm.message_bytes / MB)} MB = {fmt(mb)} MB.",
                (mb / 2, "forward only."),
            ),
        ),
        "Count both passes: TP moves 4 b s h-sized all-reduces per layer per micro-batch.",
    )


def activation_size() -> Critique:
    flash = activation_bytes_per_layer(4096, 8, 2048, 16, flash_attention=True) / GB
    full = activation_bytes_per_layer(4096, 8, 2048, 16) / GB
    return Critique(
        "critique:activations-20-bytes",
        "How big are activations?",
        "sources/004 (flashcards), card 81",
        "Estimate the activations of a 1B model (24 layers, hidden 2048, 16 heads), micro-batch 8, "
        "sequence 4096, bf16, no recomputation.",
        (
            S(
                "Per layer that is about 10 values of 2 bytes per element of b x s x h: 20 bytes "
                "each.",
                True,
                "Korthikanti et al. count 34 bytes per element (attention 11, MLP 19, LayerNorms "
                "4, with 1-byte dropout masks) plus 5 a s^2 b for the attention scores unless "
                "FlashAttention drops them.",
            ),
            S(
                "About 1.3 GB per layer, 31 GB for 24 layers: more than the model state.",
                True,
                f"{fmt(flash)} GB per layer even with FlashAttention ({fmt(24 * flash)} GB in "
                f"all); "
                f"{fmt(full)} GB per layer without it. The conclusion holds, more strongly.",
            ),
            S(
                "Without FlashAttention the attention part grows with the square of the sequence.",
                False,
                "Right: the s x s scores.",
            ),
            S(
                "Checkpointing every sqrt(L) layers cuts activation memory to O(sqrt L) for about "
                "one "
                "extra forward pass.",
                False,
                "Right (Chen et al. 2016).",
            ),
        ),
        (
            fix(
                "activations-20-bytes",
                0,
                "Activations per layer with FlashAttention",
                flash,
                "GB",
                f"34 x 4096 x 8 x 2048 B = {fmt(flash)} GB.",
                (20 * 4096 * 8 * 2048 / GB, "20 bytes per element undercounts."),
            ),
            fix(
                "activations-20-bytes",
                1,
                "Activations per layer without FlashAttention",
                full,
                "GB",
                f"s b h (34 + 5 a s / h) = {fmt(full)} GB.",
                (flash, "that leaves out the 5 a s^2 b bytes of attention scores."),
            ),
        ),
        "Use s b h (34 + 5 a s / h) per layer (Korthikanti et al. 2022, Table 2).",
    )


def ddp_hang() -> Critique:
    return Critique(
        "critique:ddp-hang-fixes",
        "DDP hangs at the end of an epoch",
        "sources/000 (Day 58), production challenge 1; sources/001 (Day 33), question 13",
        "DDP training hangs forever near the end of an epoch. What is wrong and how do you fix it?",
        (
            S(
                "Some ranks get more batches than others; a rank that carries on alone waits "
                "forever in "
                "an all-reduce the others never join.",
                False,
                "Right.",
            ),
            S(
                "Setting a 30-minute timeout in init_process_group fixes it.",
                True,
                "A timeout only turns the hang into an error after 30 minutes (NCCL raises it "
                "through its asynchronous error handling); the ranks still disagree.",
            ),
            S(
                "Give every rank the same number of batches - DistributedSampler pads to a "
                "multiple of "
                "the world size - or use DDP's join context manager for uneven inputs.",
                False,
                "Right.",
            ),
            S(
                "And to stay safe, only rank 0 should ever write checkpoints.",
                True,
                "Fine for plain DDP, where replicas are identical; as a rule it is wrong: with "
                "FSDP, "
                "ZeRO, TP or PP every rank holds a different shard and writes it "
                "(torch.distributed."
                "checkpoint); rank 0 alone would first gather the whole state.",
            ),
        ),
        (),
        "Fix the disagreement between ranks; timeouts only make a hang visible.",
    )


def gpt3_layout() -> Critique:
    est = time_to_train(175e9, 300e9, 4096, 140e12, "full")
    paper = time_to_train(175e9, 300e9, 1024, 140e12, "full")
    return Critique(
        "critique:gpt3-4096",
        "3D parallelism and GPT-3",
        "sources/000 (Day 58), question 3; sources/002 (Day 7), question 4",
        "What is 3D parallelism? Give a real example.",
        (
            S("It combines data, pipeline and tensor parallelism.", False, "Right."),
            S(
                "GPT-3 was trained with 64-way data, 8-way pipeline and 8-way tensor parallelism: "
                "4,096 "
                "GPUs.",
                True,
                "GPT-3's parallel layout was never published (Brown et al. 2020 say "
                "V100 GPUs on a Microsoft cluster). Published 3D layouts of that size "
                "are Narayanan et al.'s (2021): e.g. TP = 8, PP = 8 on 1,536 A100s for "
                "a 146B model, and their GPT-3 estimate on 1,024 A100s.",
            ),
            S(
                "GPT-3 kept most layers in bf16.",
                True,
                "V100s have no bf16 arithmetic; bf16 arrived with the A100. V100-era training used "
                "fp16 with loss scaling.",
            ),
            S(
                "Tensor parallelism inside nodes, pipeline across nodes, data parallelism over "
                "replicas.",
                False,
                "Right.",
            ),
        ),
        (
            fix(
                "gpt3-4096",
                0,
                "If a 175B model did train on 300B tokens with 4,096 A100s, each "
                "executing 140 TFLOP/s with full recomputation, how many days?",
                est.days,
                "days",
                f"8 T P / (n X) = 8 x 300e9 x 175e9 / (4096 x 140e12) s = {fmt(est.days)} days "
                "(Narayanan et al. 2021, Sec. 5.1, estimate 34 days on 1,024 GPUs).",
                (paper.days, "that is Narayanan et al.'s estimate for 1,024 GPUs, not 4,096."),
                (est.days * 6 / 8, "6TP forgets the recomputed forward: 8TP."),
            ),
        ),
        "Quote published layouts with their source; GPT-3's was not published.",
    )


@lru_cache(maxsize=None)
def ITEMS() -> tuple[Critique, ...]:  # noqa: N802 (a constant, built on first use)
    return (
        ring_latency(),
        zero2_comm(),
        zero_formulas(),
        one_f_one_b_bubble(),
        interleaving(),
        sequence_parallel(),
        two_allreduces(),
        activation_size(),
        ddp_hang(),
        gpt3_layout(),
    )
