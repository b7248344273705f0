"""Section 4 of lab 13: MFU and HFU of a training step, and the levers that move them.

    count_flops(model, x, y, forward)   FLOPs of one forward + backward, counted by torch's
                                        FlopCounterMode (recomputed forwards included: the HFU
                                        numerator; without checkpointing it equals MFU's)
    levers(folder, cfg, batch, steps, compile_backend)   in this process, on ONE thread (as
                                        the peak is measured): each lever's steps profiled,
                                        step time from ITS trace
    LEVERS                              lever -> the effect predicted before measuring

MFU = model FLOPs / (step time x peak), HFU = executed FLOPs / (step time x peak). A CPU has no
data-sheet peak here: the peak is MEASURED, the best rate of a 256 x 256 fp32 matmul on one
thread of this machine (lab 10's matmul_rates), and labelled so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from lab_utils.experiments.lab02.memory import forward as checkpointed_forward
from lab_utils.experiments.lab10.local import matmul_rates, one_thread
from lab_utils.models import GPTConfig, TinyGPT, lm_loss
from lab_utils.profiling import load_traces, profiled_steps, rank_timelines

LEVERS = {  # lever: the effect predicted before it is measured
    "baseline": "-",
    "micro-batch x4": "MFU up: the fixed cost of a step (Python, op launches, the optimizer) "
    "is spread over 4x the FLOPs",
    "activation checkpointing": "step slower by about one forward (+1/3 FLOPs); HFU above MFU "
    "by the recomputation; MFU down",
    "fused AdamW": "optimizer time down (one kernel for all parameters instead of a loop); "
    "the step moves little where the optimizer is a small share",
    "torch.compile": "steady step faster (fused elementwise ops, fewer launches), after a one-off "
    "compile of seconds",
}


def count_flops(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, forward: Callable | None = None
) -> int:
    """FLOPs of one forward + backward as FlopCounterMode counts them (matmuls and attention;
    elementwise ops count 0). ``forward(model, x)`` replaces ``model(x)`` (e.g. checkpointed)."""
    with FlopCounterMode(display=False) as counter:
        lm_loss((forward or (lambda m, i: m(i)))(model, x), y).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


@dataclass
class LeverResult:
    lever: str
    predicted: str
    batch: int
    step_s: float  # mean ProfilerStep# duration in this lever's trace (wall)
    cpu_s: float  # mean CPU time of this thread per profiled step (not disturbed
    # by other programs; the profiler's own cost is in both)
    model_flops: int  # FlopCounterMode, no recomputation
    hardware_flops: int  # FlopCounterMode, recomputation included
    peak_flops: float  # measured: one thread's best matmul rate
    compile_s: float | None = None  # torch.compile: the first step's wall time

    @property
    def mfu(self) -> float:
        """From the trace's (wall) step time."""
        return self.model_flops / (self.step_s * self.peak_flops)

    @property
    def hfu(self) -> float:
        return self.hardware_flops / (self.step_s * self.peak_flops)

    @property
    def mfu_cpu(self) -> float:
        """From the CPU time the step got (what the step costs when it has the core)."""
        return self.model_flops / (self.cpu_s * self.peak_flops)


def _setup(lever: str, cfg: GPTConfig, compile_backend: str):
    model = TinyGPT(cfg, seed=0)
    fused = lever == "fused AdamW"
    opt = torch.optim.AdamW(
        model.parameters(), lr=1e-2, foreach=False if not fused else None, fused=fused or None
    )
    fwd: Callable = (
        (lambda m, i: checkpointed_forward(m, i, k=1))
        if lever == "activation checkpointing"
        else (lambda m, i: m(i))
    )
    run_model = torch.compile(model, backend=compile_backend) if lever == "torch.compile" else model
    return model, opt, fwd, run_model


def levers(
    folder: str,
    cfg: GPTConfig,
    batch: int,
    steps: int,
    compile_backend: str = "inductor",
    names: tuple = tuple(LEVERS),
) -> list[LeverResult]:
    """Profile ``steps`` steps of each lever; FLOPs counted on a separate step. The peak is one
    thread's, so every lever runs on one thread too."""
    peak = matmul_rates(sizes=(256,), min_cpu_s=0.02)[0].flops_per_s
    with one_thread():
        return [_lever(lever, folder, cfg, batch, steps, compile_backend, peak) for lever in names]


def _lever(
    lever: str,
    folder: str,
    cfg: GPTConfig,
    batch: int,
    steps: int,
    compile_backend: str,
    peak: float,
) -> LeverResult:
    b = 4 * batch if lever == "micro-batch x4" else batch
    model, opt, fwd, run_model = _setup(lever, cfg, compile_backend)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (b, cfg.seq_len), generator=g)
    hw = count_flops(model, x, x, fwd)
    flops = count_flops(model, x, x)
    cpu: list[float] = []

    def step(i: int) -> None:
        t0 = time.thread_time()
        opt.zero_grad(set_to_none=True)
        lm_loss(fwd(run_model, x), x).backward()
        opt.step()
        cpu.append(time.thread_time() - t0)

    first = time.perf_counter()
    step(0)  # compiles, for torch.compile
    first = time.perf_counter() - first
    path = profiled_steps(0, folder, lever.replace(" ", "_"), step, steps, warmup=1)
    t = rank_timelines(load_traces([path]))[0]
    step_s = sum(e - s for s, e in t.steps) / len(t.steps)
    return LeverResult(
        lever,
        LEVERS[lever],
        b,
        step_s,
        sum(cpu[-steps:]) / steps,
        flops,
        hw,
        peak,
        first if lever == "torch.compile" else None,
    )
