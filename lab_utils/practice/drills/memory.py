"""Drill generators, part 1: memory and communication (lab 12). Each samples its parameters
from the rng, asks ``lab_utils.calc`` for the answer and lists the misconceptions' answers.
Part 2 (time, FLOPs, pipelines, scaling) is ``performance``."""

from __future__ import annotations

import random

from lab_utils.calc import (
    GB,
    LINKS,
    MB,
    MOE_PRESETS,
    activation_bytes_per_layer,
    all_to_all_bytes_per_layer,
    collective_time,
    cp_bytes_per_rank,
    max_params_that_fit,
    model_state_memory,
    moe_memory_per_rank,
    moe_param_count,
    ring_bytes_per_rank,
    tp_layer_comm,
)
from lab_utils.practice.drills.model import Drill, Mistake, generator
from lab_utils.practice.items import fmt

SIZES_B = (1, 3, 7, 8, 13, 30, 34, 70, 175)
DIMS = ((4096, 32), (5120, 40), (8192, 64), (12288, 96))  # (hidden, heads) of real models
ZERO_FORMULA = {1: "4N + 12N/K", 2: "2N + 14N/K", 3: "16N/K"}
KORTHIKANTI = "Korthikanti et al. 2022, Table 2"


@generator("model_state")
def model_state(rng: random.Random) -> Drill:
    b = rng.choice(SIZES_B)
    ans = model_state_memory(b * 1e9, "mixed_adam").total / GB
    return Drill(
        f"Model-state memory of a {b}B-parameter model trained with mixed-precision Adam "
        "(bf16 weights and gradients, fp32 master weights, m and v)?",
        ans,
        "GB",
        0.02,
        f"16 B/param (2 weights + 2 grads + 4 master + 4 m + 4 v) x {b}e9 = {fmt(ans)} GB "
        "(Rajbhandari et al. 2020, Sec. 3.1).",
        params={"n_params": b * 1e9},
        mistakes=(
            Mistake(
                ans / 2,
                "mixed precision does NOT halve model state; it saves activation memory and time.",
            ),
            Mistake(
                2.0 * b,
                "2 B/param counts the bf16 weights only; training also "
                "holds gradients, the fp32 master copy and Adam's m, v.",
            ),
        ),
    )


@generator("zero_memory")
def zero_memory(rng: random.Random) -> Drill:
    b, k, stage = rng.choice(SIZES_B), rng.choice((8, 16, 64, 256)), rng.choice((1, 2, 3))
    ans = model_state_memory(b * 1e9, "mixed_adam", stage, k).total / GB
    master = "the fp32 master copy is optimizer state, so ZeRO shards it too."
    wrong = {
        1: ((8 + 8 / k, f"8N + 8N/K keeps the master weights replicated; {master}"),),
        2: (
            (16 / k, "16N/K is ZeRO-3; ZeRO-2 keeps the bf16 weights replicated (2N)."),
            (6 + 10 / k, f"6N + 10N/K keeps the master weights replicated; {master}"),
        ),
        3: ((16.0, "16N is plain DDP; ZeRO-3 / FSDP shards everything: 16N/K."),),
    }[stage]
    return Drill(
        f"Per-rank model state of a {b}B model with ZeRO-{stage} on {k} data-parallel "
        "ranks (mixed-precision Adam)?",
        ans,
        "GB",
        0.02,
        f"ZeRO-{stage}: {ZERO_FORMULA[stage]} bytes with N = {b}e9, K = {k} -> "
        f"{fmt(ans)} GB (Rajbhandari et al. 2020, Sec. 5).",
        params={"n_params": b * 1e9, "dp": k, "zero_stage": stage},
        mistakes=tuple(Mistake(v * b, why) for v, why in wrong),
    )


@generator("max_model")
def max_model(rng: random.Random) -> Drill:
    gb, k, stage = rng.choice((24, 40, 80, 141)), rng.choice((1, 8, 64)), rng.choice((0, 3))
    stage = 0 if k == 1 else stage
    ans = max_params_that_fit(gb * GB, "mixed_adam", stage, k) / 1e9
    how = "plain DDP (every rank holds everything)" if stage == 0 else "ZeRO-3 / FSDP"
    return Drill(
        f"Largest model (billions of parameters) whose mixed-precision Adam model state "
        f"fits on {k} GPU(s) of {gb} GB with {how}? Ignore activations.",
        ans,
        "B params",
        0.02,
        f"budget / bytes per param per rank = {gb} GB / (16{'' if stage == 0 else f'/{k}'}"
        f" B) = {fmt(ans)}B parameters; activations and buffers need room too.",
        params={"gpu_mem_bytes": gb * GB, "dp": k, "zero_stage": stage},
        mistakes=(
            Mistake(
                gb / 2 * (k if stage == 3 else 1),
                "counting only the bf16 "
                "weights (2 B/param) forgets gradients and Adam's fp32 state.",
            ),
        ),
    )


@generator("checkpoint_size")
def checkpoint_size(rng: random.Random) -> Drill:
    b = rng.choice(SIZES_B)
    ms = model_state_memory(b * 1e9, "mixed_adam")
    ans = (ms.master + ms.optimizer) / GB
    return Drill(
        f"Smallest checkpoint that resumes mixed-precision Adam training of a {b}B model "
        "exactly (model and optimizer only; RNG and data-loader state are tiny)?",
        ans,
        "GB",
        0.02,
        f"fp32 master (4 B) + m (4 B) + v (4 B) = 12 B/param -> {fmt(ans)} GB. The bf16 "
        "weights are re-cast from the master on load; gradients are recomputed by the "
        "next step. Megatron also saves the bf16 copy (14 B/param).",
        params={"n_params": b * 1e9},
        mistakes=(
            Mistake(
                16.0 * b,
                "gradients are not saved: the next step recomputes "
                "them, so a checkpoint is not the 16 B/param state.",
            ),
            Mistake(
                2.0 * b,
                "bf16 weights alone restart inference, not training: "
                "without Adam's m, v and the fp32 master the run "
                "does not resume exactly.",
            ),
            Mistake(
                14.0 * b,
                "14 B/param also stores the bf16 copy, which the "
                "fp32 master rebuilds; the minimum is 12 B/param.",
            ),
        ),
    )


@generator("ring_bytes")
def ring_bytes(rng: random.Random) -> Drill:
    size_mb, n = rng.choice((100, 250, 500, 1000, 2000)), rng.choice((2, 4, 8, 16, 64, 1024))
    ans = ring_bytes_per_rank("all_reduce", n, size_mb * MB) / MB
    return Drill(
        f"A ring all-reduce of a {size_mb} MB gradient buffer over {n} ranks: how many "
        "MB does EACH rank send?",
        ans,
        "MB",
        0.01,
        f"2(N-1)/N x D = 2 x {n - 1}/{n} x {size_mb} MB = {fmt(ans)} MB: reduce-scatter "
        "(N-1)/N D, then all-gather (N-1)/N D; it tends to 2D, whatever N "
        "(Patarasuk & Yuan 2009).",
        params={"n": n, "size_bytes": size_mb * MB},
        mistakes=(
            Mistake(
                (n - 1) / n * size_mb,
                "(N-1)/N x D is only the reduce-scatter half; the all-gather sends as much again.",
            ),
        ),
    )


@generator("allreduce_time")
def allreduce_time(rng: random.Random) -> Drill:
    b = rng.choice((1, 3, 7, 13))
    link, n = rng.choice((("NVLink4", 8), ("IB-NDR", 16), ("IB-NDR", 64), ("IB-HDR", 256)))
    alpha, bw = (5e-6 if link.startswith("NV") else 10e-6), LINKS[link].bytes_per_s
    size = 2 * b * 1e9  # bf16 gradients
    ans = 1e3 * collective_time("all_reduce", n, size, alpha, bw)
    return Drill(
        f"Ring all-reduce of the bf16 gradients of a {b}B model over {n} GPUs, each "
        f"with {bw / 1e9:g} GB/s per direction ({link}) and {alpha * 1e6:g} us per "
        "message: how long (alpha-beta model, no overlap)?",
        ans,
        "ms",
        0.03,
        f"2(n-1) alpha + 2(n-1)/n x D / B = {2 * (n - 1)} x {alpha * 1e6:g} us + 2 x "
        f"{n - 1}/{n} x {2 * b} GB / {bw / 1e9:g} GB/s = {fmt(ans)} ms; the latency term "
        "grows linearly with n (Patarasuk & Yuan 2009; nccl-tests).",
        params={"n": n, "size_bytes": size, "alpha_s": alpha, "bandwidth": bw},
        mistakes=(
            Mistake(
                1e3 * size / bw,
                "D / B sends the buffer once; a ring sends 2(n-1)/n x D per rank, nearly twice it.",
            ),
        ),
    )


@generator("tp_bytes")
def tp_bytes(rng: random.Random) -> Drill:
    (h, _), s, b, t = (
        rng.choice(DIMS),
        rng.choice((2048, 4096, 8192)),
        rng.choice((1, 2)),
        rng.choice((4, 8)),
    )
    comm = tp_layer_comm(b, s, h, t)
    ans, msg = comm.bytes_per_rank / MB, comm.message_bytes / MB
    return Drill(
        f"Megatron tensor parallelism, t = {t}, micro-batch {b} x {s} tokens, hidden "
        f"{h}, bf16: bytes ONE rank sends for one transformer layer, forward AND "
        "backward (no recomputation, no sequence parallelism)?",
        ans,
        "MB",
        0.02,
        f"4 all-reduces (2 forward, 2 backward) of b s h x 2 B = {fmt(msg)} MB, each "
        f"sending 2(t-1)/t of it per rank: 4 x 2 x {t - 1}/{t} x {fmt(msg)} = {fmt(ans)} "
        "MB (Shoeybi et al. 2019, Sec. 3).",
        params={"b": b, "s": s, "h": h, "t": t},
        mistakes=(
            Mistake(
                ans / 2,
                "that is the forward only: the backward all-reduces "
                "the input gradients of both blocks too (4 in all).",
            ),
            Mistake(
                4 * msg,
                "each all-reduce sends 2(t-1)/t of the message per rank, not the message once.",
            ),
        ),
    )


@generator("activations_tp")
def activations_tp(rng: random.Random) -> Drill:
    (h, a), s, t, sp = (
        rng.choice(DIMS),
        rng.choice((2048, 4096)),
        rng.choice((2, 4, 8)),
        rng.random() < 0.5,
    )
    ans = activation_bytes_per_layer(s, 1, h, a, t, sp, "selective") / MB
    sbh = s * h / MB
    other = sbh * (10 + 24 / t) if sp else sbh * 34 / t
    mode = "WITH" if sp else "without"
    return Drill(
        f"Activations one transformer layer keeps for the backward pass, per GPU: "
        f"hidden {h}, {a} heads, one sequence of {s} tokens, bf16, TP = {t} {mode} "
        "sequence parallelism, selective recomputation (no attention scores kept)?",
        ans,
        "MB",
        0.02,
        f"s b h ({'34/t' if sp else '10 + 24/t'}) = {fmt(ans)} MB ({KORTHIKANTI}). "
        "Without sequence parallelism the LayerNorm inputs and dropout masks (10 s b h) "
        "are replicated on every TP rank; SP shards them along the sequence.",
        params={"s": s, "h": h, "a": a, "t": t, "sp": sp},
        mistakes=(
            Mistake(
                other,
                "that is TP without sequence parallelism (10 + 24/t)."
                if sp
                else "TP does not divide ALL activations by t: LayerNorm "
                "and dropout activations stay replicated without SP.",
            ),
            Mistake(34 * sbh, "that is the layer without tensor parallelism."),
        ),
    )


@generator("long_context")
def long_context(rng: random.Random) -> Drill:
    (h, a), s, cp = (
        rng.choice(DIMS[:3]),
        rng.choice((32768, 65536, 131072)),
        rng.choice((1, 2, 4, 8)),
    )
    ans = activation_bytes_per_layer(s // cp, 1, h, a, flash_attention=True) / GB
    quad = activation_bytes_per_layer(s // cp, 1, h, a) / GB
    where = "one GPU" if cp == 1 else f"{cp} GPUs with context parallelism (ring attention)"
    slips = [
        Mistake(
            quad,
            "FlashAttention never stores the s x s score matrix (the 5 a s^2 b "
            "term): activations grow linearly with s.",
        )
    ]
    if cp > 1:
        slips.append(
            Mistake(
                ans * cp,
                "context parallelism splits the sequence: each rank keeps "
                "only its s/cp tokens' activations.",
            )
        )
    return Drill(
        f"Long context: one transformer layer (hidden {h}, {a} heads, bf16, no TP, no "
        f"recomputation) trains on one {s:,}-token sequence with FlashAttention on "
        f"{where}. Activation memory the layer keeps per GPU?",
        ans,
        "GB",
        0.02,
        f"34 x (s/cp) x b x h bytes = 34 x {s // cp:,} x {h} = {fmt(ans)} GB ("
        f"{KORTHIKANTI}, without the score term that FlashAttention removes; Dao et "
        "al. 2022).",
        params={"s": s, "h": h, "a": a, "cp": cp},
        mistakes=tuple(slips),
    )


CP_HOW = {
    "ring": "ring attention (K/V blocks passed around the ring)",
    "ulysses": "DeepSpeed-Ulysses (all-to-all from sequence to head shards and back)",
    "allgather_kv": "Llama 3's all-gather of K and V",
}


@generator("cp_bytes")
def cp_bytes(rng: random.Random) -> Drill:
    (h, a), s, n = rng.choice(DIMS), rng.choice((32768, 131072)), rng.choice((2, 4, 8))
    variant = rng.choice(tuple(CP_HOW))
    f = cp_bytes_per_rank(variant, 1, a, s, h // a, n, 2)
    ans, blk = (f.forward + f.backward) / GB, s // n * h * 2 / GB  # blk: one rank's K (or V)
    how = {
        "ring": f"2(N-1) + 2(2N-1) = {2 * (n - 1) + 2 * (2 * n - 1)} blk: (N-1) hops of (K, "
        "V) forward, (N-1) again in backward plus N hops of (dK, dV)",
        "ulysses": f"8 (N-1)/N = {8 * (n - 1) / n:g} blk: all-to-alls of q, k, v, out "
        "forward and of their gradients backward, 1/N of each staying home",
        "allgather_kv": f"2(N-1) + 2(N-1) = {4 * (n - 1)} blk: all-gather (K, V) forward, "
        "reduce-scatter (dK, dV) backward",
    }[variant]
    slips = {
        "ring": [
            Mistake(
                f.forward / GB,
                "backward sends the K/V blocks around again and "
                "their gradient accumulators (dK, dV) too.",
            )
        ],
        "ulysses": [
            Mistake(
                8 * blk,
                "an all-to-all keeps 1/N of its buffer at home: (N-1)/N of each leaves the rank.",
            ),
            Mistake(
                2 * (3 * n - 2) * blk,
                "Ulysses does not pass K/V around a ring; that is ring attention's count.",
            ),
        ][: 2 if n > 2 else 1],  # N = 2: both slips give 8 blk
        "allgather_kv": [
            Mistake(f.forward / GB, "backward reduce-scatters dK and dV: the same bytes again.")
        ],
    }[variant]
    return Drill(
        f"Context parallelism with {CP_HOW[variant]} over N = {n} GPUs: one {s:,}-token"
        f" sequence, hidden {h}, {a} heads (no GQA), bf16. Bytes ONE rank sends per "
        "attention layer, forward + backward (ring formula of each collective)?",
        ans,
        "GB",
        0.02,
        f"blk = (s/N) x h x 2 B = {fmt(blk)} GB (one rank's K or V); "
        f"{how} -> {fmt(ans)} GB (calc.cp_bytes_per_rank; lab 08 measures it).",
        params={"variant": variant, "s": s, "h": h, "a": a, "n": n},
        mistakes=tuple(slips),
    )


@generator("moe_memory")
def moe_memory(rng: random.Random) -> Drill:
    cfg, ep = MOE_PRESETS["mixtral-8x7b"], rng.choice((2, 8))  # EP = E/k = 4 holds the active count
    count = moe_param_count(cfg)
    total, routed, active = count.total / 1e9, count.routed_experts / 1e9, count.active() / 1e9
    ans = moe_memory_per_rank(cfg, ep).total / GB
    return Drill(
        f"Mixtral 8x7B: {total:.1f}B parameters in all ({routed:.1f}B of them in the "
        f"routed experts), {active:.1f}B active per token. Mixed-precision Adam, the "
        f"experts split over EP = {ep} GPUs, no ZeRO, TP or PP: model state per GPU?",
        ans,
        "GB",
        0.02,
        f"16 B x (routed / EP + the rest) = 16 x ({routed:.2f}/{ep} + "
        f"{total - routed:.2f}) B = {fmt(ans)} GB: expert parallelism splits only the "
        "routed experts; attention, embeddings and norms are replicated (calc.moe).",
        params={"ep": ep},
        mistakes=(
            Mistake(
                16 * total / ep,
                "EP splits only the routed experts; the rest is replicated on every EP rank.",
            ),
            Mistake(
                16 * active,
                "active parameters set the FLOPs; memory follows every stored parameter.",
            ),
        ),
    )


@generator("moe_all_to_all")
def moe_all_to_all(rng: random.Random) -> Drill:
    tokens, h, k, ep = (
        rng.choice((4096, 8192, 16384)),
        rng.choice((4096, 7168)),
        rng.choice((6, 8)),
        rng.choice((8, 16, 64)),
    )
    ans = all_to_all_bytes_per_layer(tokens, h, k, ep).forward / MB
    return Drill(
        f"MoE layer, expert parallelism over {ep} GPUs, top-{k} routing, {tokens} tokens "
        f"per GPU, hidden {h}, bf16 dispatch and combine, uniform routing: bytes one GPU "
        "sends in the forward pass's two all-to-alls?",
        ans,
        "MB",
        0.02,
        f"dispatch + combine = 2 x (ep-1)/ep x T k h x 2 B = 2 x {ep - 1}/{ep} x {tokens}"
        f" x {k} x {h} x 2 B = {fmt(ans)} MB (calc.moe; DeepSeek-AI 2024 Sec. 3.3).",
        params={"tokens": tokens, "h": h, "k": k, "ep": ep},
        mistakes=(
            Mistake(ans / k, "each token goes to k experts: k rows per token."),
            Mistake(
                ans / 2,
                "the combine sends the expert outputs back: as many bytes again as the dispatch.",
            ),
        ),
    )
