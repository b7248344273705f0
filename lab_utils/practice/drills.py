"""Quick-math drills for interviews, generated from ``lab_utils.calc`` and checked (lab 12).

    drills = make_drills(seed=0)          # one drill of every kind, random but reproducible
    d = drills[0]; print(d.question)
    d.check(48)                           # DrillResult: accepted within tolerance, or the
                                          # explanation of the right answer (never raises)
    drill_widget(seed=0)                  # the same drills in a small ipywidgets quiz

Every answer is computed by the calculators the labs use, so a drill can never disagree
with a lab. Each drill also carries a ``mistake``: the answer a common misconception gives
(e.g. ZeRO-1 as 8N + 8N/K), so the lab can show what a wrong answer earns.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from lab_utils.calc import (DEVICES, GB, MB, amdahl_speedup, bubble, flops_per_token,
                            gustafson_speedup, max_params_that_fit, model_state_memory,
                            ring_bytes_per_rank)


@dataclass(frozen=True)
class DrillResult:
    """Verdict of one answer. ``message`` says why; ``accepted`` is the verdict."""

    accepted: bool
    value: Any
    message: str

    def __bool__(self) -> bool:
        return self.accepted

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Drill:
    """One question with its computed answer. ``tolerance`` is RELATIVE (0.02 = 2%)."""

    question: str
    answer: float
    unit: str
    tolerance: float
    explanation: str
    kind: str = ""
    params: dict = field(default_factory=dict)
    mistake: float | None = None  # what a common misconception answers
    mistake_why: str = ""

    def check(self, value: Any) -> DrillResult:
        """Accept ``value`` if within ``tolerance`` of the answer, else explain. Never raises:
        a non-number is rejected with a message, like a wrong number."""
        try:
            x = float(str(value).replace(",", "").strip()) if isinstance(value, str) \
                else float(value)
        except (TypeError, ValueError):
            return DrillResult(False, value, f"{value!r} is not a number: answer in {self.unit}.")
        if not math.isfinite(x):
            return DrillResult(False, value, f"{value!r} is not a finite number.")
        if abs(x - self.answer) <= self.tolerance * abs(self.answer):
            return DrillResult(True, value, f"Correct: {fmt(self.answer)} {self.unit}. "
                                            f"{self.explanation}")
        hint = ""
        if self.mistake is not None and abs(x - self.mistake) <= self.tolerance * abs(self.mistake):
            hint = f" That is a classic mistake: {self.mistake_why}"
        return DrillResult(False, value, f"Not quite: {fmt(x)} {self.unit}, expected "
                                         f"{fmt(self.answer)} {self.unit}.{hint} "
                                         f"{self.explanation}")


def fmt(x: float) -> str:
    """4 significant digits, no scientific notation for everyday sizes."""
    return f"{x:,.4g}" if abs(x) < 1e6 else f"{x:,.0f}"


# --- generators: rng -> Drill. Each samples its parameters, then asks calc. -----------------
SIZES_B = (1, 3, 7, 8, 13, 30, 34, 70, 175)


def model_state(rng: random.Random) -> Drill:
    b = rng.choice(SIZES_B)
    ans = model_state_memory(b * 1e9, "mixed_adam").total / GB
    return Drill(f"Model-state memory of a {b}B-parameter model trained with mixed-precision Adam "
                 "(bf16 weights and gradients, fp32 master weights, m and v)? Answer in GB.",
                 ans, "GB", 0.02, f"16 B/param (2 weights + 2 grads + 4 master + 4 m + 4 v) x "
                 f"{b}e9 = {fmt(ans)} GB (Rajbhandari et al. 2020, Sec. 3.1).", "model_state",
                 {"n_params": b * 1e9}, ans / 2, "mixed precision does NOT halve model state; it "
                 "saves activation memory and time.")


ZERO_FORMULA = {1: "4N + 12N/K", 2: "2N + 14N/K", 3: "16N/K"}


def zero_memory(rng: random.Random) -> Drill:
    b, k, stage = rng.choice(SIZES_B), rng.choice((8, 16, 64, 256)), rng.choice((1, 2, 3))
    ans = model_state_memory(b * 1e9, "mixed_adam", stage, k).total / GB
    wrong = {1: (8 + 8 / k, "ZeRO-1 is 4N + 12N/K, not 8N + 8N/K: the fp32 master copy is "
                            "optimizer state, so it is sharded too."),
             2: (16 / k, "16N/K is ZeRO-3; ZeRO-2 keeps the bf16 weights replicated (2N)."),
             3: (16.0, "16N is plain DDP; ZeRO-3 / FSDP shards everything: 16N/K.")}[stage]
    return Drill(f"Per-rank model state of a {b}B model with ZeRO-{stage} on {k} data-parallel "
                 "ranks (mixed-precision Adam)? Answer in GB.", ans, "GB", 0.02,
                 f"ZeRO-{stage}: {ZERO_FORMULA[stage]} bytes with N = {b}e9, K = {k} -> "
                 f"{fmt(ans)} GB (Rajbhandari et al. 2020, Sec. 5).", "zero_memory",
                 {"n_params": b * 1e9, "dp": k, "zero_stage": stage}, wrong[0] * b, wrong[1])


def ring_bytes(rng: random.Random) -> Drill:
    size_mb, n = rng.choice((100, 250, 500, 1000, 2000)), rng.choice((2, 4, 8, 16, 64, 1024))
    ans = ring_bytes_per_rank("all_reduce", n, size_mb * MB) / MB
    return Drill(f"A ring all-reduce of a {size_mb} MB gradient buffer over {n} ranks: how many "
                 "MB does EACH rank send?", ans, "MB", 0.01,
                 f"2(N-1)/N x D = 2 x {n - 1}/{n} x {size_mb} MB = {fmt(ans)} MB: reduce-scatter "
                 "(N-1)/N D, then all-gather (N-1)/N D; it tends to 2D, whatever N "
                 "(Patarasuk & Yuan 2009).", "ring_bytes", {"n": n, "size_bytes": size_mb * MB},
                 (n - 1) / n * size_mb, "(N-1)/N x D is only the reduce-scatter half; the "
                 "all-gather sends as much again.")


def pipeline_bubble(rng: random.Random) -> Drill:
    p = rng.choice((2, 4, 8, 16))
    m = rng.choice([m for m in (4, 8, 16, 32, 64) if m <= 16 * (p - 1)])  # (p-1)/m visible
    b = bubble("1f1b", p, m)
    return Drill(f"1F1B pipeline, p = {p} stages, m = {m} micro-batches per step: what fraction "
                 "of the step's wall time does a stage sit idle (the bubble)? Answer in %.",
                 100 * b.of_total, "%", 0.02,
                 f"(p-1)/(m+p-1) = {p - 1}/{m + p - 1} = {100 * b.of_total:.3g}% of the step "
                 f"(the same for GPipe; (p-1)/m = {100 * b.of_ideal:.3g}% is relative to the ideal "
                 "compute time; Narayanan et al. 2021, Sec. 2.2).", "bubble", {"p": p, "m": m},
                 100 * b.of_ideal, "(p-1)/m is the bubble relative to the ideal compute time, "
                 "not to the step.")


def amdahl(rng: random.Random) -> Drill:
    s, n = rng.choice((0.01, 0.02, 0.05, 0.1, 0.2)), rng.choice((8, 16, 64, 256, 1024))
    ans = amdahl_speedup(s, n)
    return Drill(f"{s:.0%} of a fixed job is serial. Speedup on {n} devices (Amdahl)? Answer "
                 "as a factor (x).", ans, "x", 0.02,
                 f"1 / (s + (1-s)/N) = 1 / ({s:g} + {1 - s:g}/{n}) = {fmt(ans)}x; never above "
                 f"1/s = {fmt(1 / s)}x (Amdahl 1967).", "amdahl", {"serial_fraction": s, "n": n},
                 gustafson_speedup(s, n), "N - s(N-1) is Gustafson's scaled speedup, for a "
                 "problem that grows with N; a fixed job obeys Amdahl.")


def max_model(rng: random.Random) -> Drill:
    gb, k, stage = rng.choice((24, 40, 80, 141)), rng.choice((1, 8, 64)), rng.choice((0, 3))
    stage = 0 if k == 1 else stage
    ans = max_params_that_fit(gb * GB, "mixed_adam", stage, k) / 1e9
    how = "plain DDP (every rank holds everything)" if stage == 0 else "ZeRO-3 / FSDP"
    return Drill(f"Largest model (billions of parameters) whose mixed-precision Adam model state "
                 f"fits on {k} GPU(s) of {gb} GB with {how}? Ignore activations.", ans,
                 "B params", 0.02,
                 f"budget / bytes per param per rank = {gb} GB / (16{'' if stage == 0 else f'/{k}'}"
                 f" B) = {fmt(ans)}B parameters; activations and buffers need room too.",
                 "max_model", {"gpu_mem_bytes": gb * GB, "dp": k, "zero_stage": stage},
                 gb / 2 * (k if stage == 3 else 1), "counting only the bf16 weights (2 B/param) "
                 "forgets gradients and Adam's fp32 state.")


def training_days(rng: random.Random) -> Drill:
    b, tokens_b = rng.choice((7, 13, 70, 175)), rng.choice((300, 1000, 2000))
    dev, n, util = rng.choice(("A100-SXM4-80GB", "H100-SXM5-80GB")), rng.choice((256, 1024, 2048)), \
        rng.choice((0.35, 0.4, 0.5))
    flops = flops_per_token(b * 1e9) * tokens_b * 1e9
    ans = flops / (n * DEVICES[dev].peak_flops * util) / 86400
    return Drill(f"Training a {b}B model on {tokens_b}B tokens with {n} {dev} GPUs (dense bf16 "
                 f"peak {DEVICES[dev].peak_flops / 1e12:g} TFLOP/s) at {util:.0%} MFU: how many "
                 "days?", ans, "days", 0.03,
                 f"6 x P x tokens = {flops:.3g} FLOPs; / ({n} x {DEVICES[dev].peak_flops:.3g} x "
                 f"{util:g}) = {fmt(ans)} days (C = 6PT: Kaplan et al. 2020).", "training_days",
                 {"n_params": b * 1e9, "tokens": tokens_b * 1e9, "device": dev, "n": n,
                  "mfu": util}, ans / 3, "2PT counts the forward pass only; training is 6PT "
                 "(backward costs twice the forward).")


GENERATORS: dict[str, Callable[[random.Random], Drill]] = {
    "model_state": model_state, "zero_memory": zero_memory, "ring_bytes": ring_bytes,
    "bubble": pipeline_bubble, "amdahl": amdahl, "max_model": max_model,
    "training_days": training_days}


def make_drills(seed: int = 0, n: int | None = None, kinds: list[str] | None = None) -> list[Drill]:
    """Drills from a seeded RNG (same seed -> same drills). Default: one of each kind in
    ``kinds`` (default: all of ``GENERATORS``); with ``n``, n drills cycling through them."""
    kinds = list(GENERATORS) if kinds is None else list(kinds)
    for k in kinds:
        if k not in GENERATORS:
            raise ValueError(f"unknown drill kind {k!r}; choose from {', '.join(GENERATORS)}")
    rng = random.Random(seed)
    count = len(kinds) if n is None else n
    return [GENERATORS[kinds[i % len(kinds)]](rng) for i in range(count)]


class DrillSession:
    """The quiz state the widget shows (testable without a browser): the current drill, the
    answers given, the score."""

    def __init__(self, seed: int = 0, kinds: list[str] | None = None, n: int = 20) -> None:
        self.drills = make_drills(seed, n, kinds)
        self.index, self.correct, self.answered = 0, 0, 0
        self.last: DrillResult | None = None

    @property
    def current(self) -> Drill:
        return self.drills[self.index % len(self.drills)]

    def submit(self, value: Any) -> DrillResult:
        self.last = self.current.check(value)
        self.answered += 1
        self.correct += self.last.accepted
        return self.last

    def next(self) -> Drill:
        self.index, self.last = self.index + 1, None
        return self.current


def drill_widget(seed: int = 0, kinds: list[str] | None = None) -> Any:
    """An ipywidgets quiz over ``DrillSession``: question, answer box, Check / Next / Answer."""
    import html

    import ipywidgets as w

    s = DrillSession(seed, kinds)
    question, feedback, score = w.HTML(), w.HTML(), w.HTML()
    box = w.Text(placeholder="your answer (a number)", layout=w.Layout(width="260px"))
    check_b, next_b, show_b = w.Button(description="Check"), w.Button(description="Next"), \
        w.Button(description="Show answer")

    def show() -> None:
        d = s.current
        question.value = (f"<b>Drill {s.index + 1}</b> ({d.kind}, answer in {d.unit}): "
                          f"{html.escape(d.question)}")
        score.value = f"score {s.correct}/{s.answered}"

    def on_check(_: Any) -> None:
        r = s.submit(box.value)
        color = "#1a7f37" if r.accepted else "#8a1c1c"
        feedback.value = f'<span style="color:{color}">{html.escape(r.message)}</span>'
        show()

    def on_next(_: Any) -> None:
        s.next()
        box.value, feedback.value = "", ""
        show()

    def on_show(_: Any) -> None:
        feedback.value = html.escape(f"{fmt(s.current.answer)} {s.current.unit}. "
                                     f"{s.current.explanation}")

    check_b.on_click(on_check), next_b.on_click(on_next), show_b.on_click(on_show)
    show()
    ui = w.VBox([w.HTML("<h4>Quick-math drills</h4>"), question,
                 w.HBox([box, check_b, next_b, show_b]), feedback, score])
    ui.session = s  # the state, for tests and for the curious
    return ui
