"""Drill generators, part 2: pipelines, scaling, FLOPs, time and cost (lab 12). Each answer comes
from ``lab_utils.calc``; each drill lists the answers of its common misconceptions."""

from __future__ import annotations

import random

from lab_utils.calc import (
    DEVICES,
    amdahl_limit,
    amdahl_speedup,
    bubble,
    gustafson_speedup,
    mfu,
    peak_in_flight,
    time_to_train,
)
from lab_utils.practice.drills.model import Drill, Mistake, generator
from lab_utils.practice.items import MILLION_USD, fmt

GPUS = ("A100-SXM4-80GB", "H100-SXM5-80GB")


def peak_tflops(device: str) -> float:
    return DEVICES[device].peak_flops / 1e12


@generator("bubble")
def pipeline_bubble(rng: random.Random) -> Drill:
    p = rng.choice((2, 4, 8, 16))  # (p-1)/m visible; not lab 12's own worked example (4, 16)
    m = rng.choice([m for m in (4, 8, 16, 32, 64) if m <= 16 * (p - 1) and (p, m) != (4, 16)])
    b = bubble("1f1b", p, m)
    return Drill(
        f"1F1B pipeline, p = {p} stages, m = {m} micro-batches per step: what fraction "
        "of the step's wall time does a stage sit idle (the bubble)?",
        100 * b.of_total,
        "%",
        0.02,
        f"(p-1)/(m+p-1) = {p - 1}/{m + p - 1} = {100 * b.of_total:.3g}% of the step "
        f"(the same for GPipe; (p-1)/m = {100 * b.of_ideal:.3g}% is relative to the ideal "
        "compute time; Narayanan et al. 2021, Sec. 2.2).",
        params={"p": p, "m": m},
        mistakes=(
            Mistake(
                100 * b.of_ideal,
                "(p-1)/m is the bubble relative to the ideal compute time, not to the step.",
            ),
        ),
    )


@generator("pp_memory")
def pp_memory(rng: random.Random) -> Drill:
    p = rng.choice((8, 16))  # p = 4 is lab 12's worked example
    if rng.random() < 0.5:  # plain 1F1B vs GPipe
        m = rng.choice((2 * p, 4 * p))
        ans = peak_in_flight("1f1b", p, m, 0)
        return Drill(
            f"1F1B pipeline with p = {p} stages and m = {m} micro-batches: how many "
            "micro-batches' activations does the FIRST stage hold at its peak?",
            ans,
            "micro-batches",
            0.02,
            f"min(p, m) = {fmt(ans)}: stage 0 runs p warm-up forwards before its first "
            "backward (Narayanan et al. 2021, Sec. 2.2.1). p micro-batches of L/p layers "
            "= one micro-batch of the whole model.",
            params={"p": p, "m": m, "v": 1},
            mistakes=(
                Mistake(
                    float(m),
                    "m in flight is GPipe; 1F1B frees each micro-batch after its backward.",
                ),
                Mistake(
                    1.0, "pipeline parallelism does not divide the first stage's activations by p."
                ),
            ),
        )
    p, v = rng.choice((2, 4, 8)), rng.choice((2, 4))
    p, v = (8, 2) if (p, v) == (4, 2) else (p, v)  # (4, 2): the worked example
    m = rng.choice((2 * p, 4 * p))
    ans = peak_in_flight("interleaved", p, m, 0, v) / peak_in_flight("1f1b", p, m, 0)
    return Drill(
        f"Interleaved 1F1B, p = {p} ranks, v = {v} model chunks per rank, m = {m} "
        "micro-batches: the first stage's peak activation memory, as a multiple of "
        "plain 1F1B's?",
        ans,
        "x 1F1B",
        0.02,
        f"1 + (p-1)/(p v) = {fmt(ans)}x: the warm-up runs 2(p-1) + (v-1)p chunk forwards, "
        "each 1/v of a stage (Korthikanti et al. 2022, Sec. 4; Narayanan et al. 2021, "
        "Sec. 2.2.2). Interleaving shrinks the bubble and RAISES memory.",
        params={"p": p, "m": m, "v": v},
        mistakes=(
            Mistake(
                1.0,
                "interleaving does not keep 1F1B's memory: the longer warm-up holds more chunks.",
            ),
            Mistake(1 / v, "each chunk is 1/v of a stage, but stage 0 holds more than p of them."),
        ),
    )


@generator("amdahl")
def amdahl(rng: random.Random) -> Drill:
    s, n = rng.choice((0.01, 0.02, 0.05, 0.1, 0.2)), rng.choice((8, 16, 64, 128, 512, 1024))
    speed = amdahl_speedup(s, n)
    if rng.random() < 0.5:
        return Drill(
            f"{s:.0%} of a fixed job is serial. Speedup on {n} devices (Amdahl)?",
            speed,
            "x",
            0.02,
            f"1 / (s + (1-s)/N) = 1 / ({s:g} + {1 - s:g}/{n}) = {fmt(speed)}x; never "
            f"above 1/s = {fmt(1 / s)}x (Amdahl 1967).",
            params={"serial_fraction": s, "n": n, "ask": "speedup"},
            mistakes=(
                Mistake(
                    gustafson_speedup(s, n),
                    "N - s(N-1) is Gustafson's scaled "
                    "speedup, for a problem that grows with N; a fixed job "
                    "obeys Amdahl.",
                ),
                Mistake(
                    amdahl_limit(s),
                    "1/s is the limit for infinitely many devices, not the speedup on N.",
                ),
            ),
        )
    eff = 100 * speed / n
    return Drill(
        f"{s:.0%} of a fixed job is serial. Parallel efficiency (speedup / N) on {n} devices?",
        eff,
        "%",
        0.02,
        f"speedup 1 / ({s:g} + {1 - s:g}/{n}) = {fmt(speed)}x; / {n} = {fmt(eff)}% (Amdahl 1967).",
        params={"serial_fraction": s, "n": n, "ask": "efficiency"},
        mistakes=(
            Mistake(
                100 * gustafson_speedup(s, n) / n,
                "that is Gustafson's scaled speedup over N; a fixed job obeys Amdahl.",
            ),
            Mistake(
                100 * amdahl_limit(s) / n,
                "1/s is the speedup limit for infinitely many devices, not the speedup on N.",
            ),
        ),
    )


@generator("mfu")
def model_flops_utilization(rng: random.Random) -> Drill:
    b, dev, n = rng.choice((7, 13, 70, 175)), rng.choice(GPUS), rng.choice((64, 256, 1024))
    target = rng.choice((0.3, 0.38, 0.45, 0.52))
    tps = float(f"{target * n * DEVICES[dev].peak_flops / (6 * b * 1e9):.3g}")
    ans = 100 * mfu(b * 1e9, tps, n, DEVICES[dev].peak_flops)
    return Drill(
        f"A {b}B dense model trains at {tps:,.0f} tokens/s on {n} {dev} GPUs (dense "
        f"bf16 peak {peak_tflops(dev):g} TFLOP/s each). Model FLOPs utilisation (MFU)?",
        ans,
        "%",
        0.02,
        f"6 P x tokens/s / (n x peak) = 6 x {b}e9 x {tps:.3g} / ({n} x "
        f"{peak_tflops(dev):g}e12) = {fmt(ans)}% (Chowdhery et al. 2022, App. B).",
        params={"n_params": b * 1e9, "tokens_per_s": tps, "n": n, "device": dev},
        mistakes=(
            Mistake(
                ans / 3,
                "2P FLOPs per token is the forward only; training "
                "is 6P (the backward costs twice the forward).",
            ),
            Mistake(
                ans / 2,
                "the datasheet's 2:4-sparsity peak is twice the "
                "dense peak MFU is measured against.",
            ),
        ),
    )


@generator("training_days")
def training_days(rng: random.Random) -> Drill:
    b, tokens_b, n = (
        rng.choice((7, 13, 70, 175)),
        rng.choice((300, 1000, 2000)),
        rng.choice((256, 1024, 2048)),
    )
    if rng.random() < 0.5:
        dev, util = rng.choice(GPUS), rng.choice((0.35, 0.4, 0.5))
        est = time_to_train(
            b * 1e9, tokens_b * 1e9, n, mfu=util, peak_flops=DEVICES[dev].peak_flops
        )
        how = f"{dev} GPUs (dense bf16 peak {peak_tflops(dev):g} TFLOP/s) at {util:.0%} MFU"
        rule = (
            f"6 P T / (n x peak x MFU) = {est.flops:.3g} FLOPs / ({n} x "
            f"{peak_tflops(dev):g}e12 x {util:g})"
        )
        how_params = {"device": dev, "mfu": util}
        slips = (
            Mistake(
                est.days / 3,
                "2PT counts the forward pass only; training is 6PT "
                "(backward costs twice the forward).",
            ),
        )
    else:
        x = rng.choice((120, 140, 160))
        est = time_to_train(b * 1e9, tokens_b * 1e9, n, x * 1e12, "full")
        how = f"A100s that each execute {x} TFLOP/s, full activation recomputation included"
        rule = f"8 T P / (n X) = {est.flops:.3g} FLOPs / ({n} x {x}e12)"
        how_params = {"flops_per_gpu": x * 1e12, "recompute": "full"}
        slips = (
            Mistake(
                est.days * 6 / 8,
                "full recomputation runs the forward twice: 8TP, not "
                "6TP (Narayanan et al. 2021, Sec. 5.1).",
            ),
            Mistake(
                est.days / 4, "2TP is the forward only; with recomputation training executes 8TP."
            ),
        )
    return Drill(
        f"Training a {b}B dense model on {tokens_b}B tokens with {n} {how}: how many days?",
        est.days,
        "days",
        0.03,
        f"{rule} = {fmt(est.days)} days (Kaplan et al. "
        "2020: 6PT; Narayanan et al. 2021, Sec. 5.1: 8TP/(nX) with recomputation).",
        params={"n_params": b * 1e9, "tokens": tokens_b * 1e9, "n": n, **how_params},
        mistakes=slips,
    )


@generator("training_cost")
def training_cost(rng: random.Random) -> Drill:
    b, tokens_b, n = (
        rng.choice((7, 13, 70)),
        rng.choice((1000, 2000, 15000)),
        rng.choice((512, 1024, 4096)),
    )
    price, util, dev = rng.choice((2.0, 2.5, 3.0)), rng.choice((0.35, 0.4, 0.45)), GPUS[1]
    est = time_to_train(
        b * 1e9,
        tokens_b * 1e9,
        n,
        mfu=util,
        peak_flops=DEVICES[dev].peak_flops,
        price_per_gpu_hour=price,
    )
    ans = est.cost / 1e6
    return Drill(
        f"Cost to train a {b}B dense model on {tokens_b:,}B tokens on {n} H100s "
        f"(dense bf16 peak {peak_tflops(dev):g} TFLOP/s) at {util:.0%} MFU, at "
        f"{price:g} USD per GPU-hour?",
        ans,
        MILLION_USD,
        0.03,
        f"{est.flops:.3g} FLOPs / ({peak_tflops(dev):g}e12 x {util:g}) = "
        f"{fmt(est.gpu_hours)} GPU-hours x {price:g} USD = {fmt(ans)} million USD. "
        "The GPU count "
        "changes the days, not the GPU-hours (calc.time_to_train).",
        params={
            "n_params": b * 1e9,
            "tokens": tokens_b * 1e9,
            "n": n,
            "price": price,
            "device": dev,
            "mfu": util,
        },
        mistakes=(
            Mistake(
                ans / n, "the price is per GPU-hour: multiply the hours by the number of GPUs."
            ),
            Mistake(ans / 3, "2PT counts the forward only; training is 6PT."),
        ),
    )


@generator("fp8_speedup")
def fp8_speedup(rng: random.Random) -> Drill:
    f = rng.choice((0.5, 0.6, 0.7, 0.8, 0.9))
    ans = amdahl_speedup(1 - f, 2)
    return Drill(
        f"Matrix multiplications take {f:.0%} of a training step in bf16. FP8 doubles "
        "the matmul peak (and you reach it); everything else (norms, softmax, "
        "communication, optimizer) stays as it is. Step speedup?",
        ans,
        "x",
        0.02,
        f"Amdahl over the matmul share: 1 / ({1 - f:.1f} + {f:.1f}/2) = {fmt(ans)}x "
        "(Micikevicius et al. 2022 for the formats; only the matmuls run in FP8).",
        params={"matmul_share": f},
        mistakes=(
            Mistake(
                2.0, "only the matmuls get faster; the rest of the step does not (Amdahl's law)."
            ),
        ),
    )
