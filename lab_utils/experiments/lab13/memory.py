"""Section 3 of lab 13: a training step's memory over time, from the profiler, beside lab 01's
ledger.

    memory_timeline(cfg, batch, steps, folder)   the lab 01 recipe (TinyGPT, fp32 AdamW, fresh
                                                 model) profiled with profile_memory=True

The profiler's "[memory]" events carry "Total Allocated": bytes allocated since the profiler
started, net of the frees it saw. Only the parameters exist before it starts (a fresh model,
the optimizer state is allocated by the first step), so bytes held = parameter bytes + Total
Allocated. Lab 01's ledger (``lab01.step_memory``: params + grads + optimizer state + saved
activations, at hook events) is the prediction; the profiler also sees temporaries that live
inside one operation (backward's intermediate gradients), which the ledger does not count.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from lab_utils.experiments import lab01
from lab_utils.models import GPTConfig, TinyGPT, lm_loss
from lab_utils.profiling import load_trace


@dataclass
class MemoryTimeline:
    times_s: list[float]  # from the profile's first memory event (wall)
    held_bytes: list[int]  # parameter bytes + Total Allocated, at each memory event
    param_bytes: int
    ledger_peak: int  # lab 01's ledger: its highest point over the same steps
    ledger_label: str  # where the ledger peaks

    @property
    def peak(self) -> int:
        return max(self.held_bytes)


def memory_timeline(cfg: GPTConfig, batch: int, steps: int, folder: str) -> MemoryTimeline:
    model = TinyGPT(cfg)  # as lab01.step_memory builds it
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [lab01.recipe_batch(cfg, batch, seed=s) for s in range(steps)]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for x, y in batches:
            opt.zero_grad(set_to_none=True)
            lm_loss(model(x), y).backward()
            opt.step()
    path = os.path.join(folder, "memory_rank0.json")
    prof.export_chrome_trace(path)
    mem = load_trace(path).memory
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    points = lab01.step_memory(cfg, steps=steps, batch=batch)
    top = max(points, key=lambda p: p.total)
    t0 = mem[0][0]
    return MemoryTimeline(
        [(t - t0) * 1e-6 for t, _ in mem],
        [params + b for _, b in mem],
        params,
        top.total,
        f"{top.phase} '{top.label}' of step {top.step}",
    )
