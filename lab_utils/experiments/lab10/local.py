"""Lab 10's in-process experiments (one core, no ranks): small matmuls, a slow data loader.

    matmul_rates(sizes)        FLOP/s of square matmuls on one thread (small = slow)
    loader_experiment(...)     a data loader that sleeps, fixed by prefetching
Timed with this thread's CPU time where other programs on the machine must not count.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import torch

from lab_utils.data import token_batches
from lab_utils.experiments.common import sgd_step
from lab_utils.models import GPTConfig, TinyGPT, lm_loss

SCALING_CONFIG = GPTConfig(vocab_size=64, seq_len=32, n_layer=2, n_head=4, d_model=64)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread here (one core = one 'device', like each rank)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def matmul_rates(
    sizes: Sequence[int] = (16, 32, 64, 128, 256, 512, 1024),
    min_cpu_s: float = 0.05,
    repeats: int = 3,
) -> list["MatmulRate"]:
    """FLOP/s of an (n x n) @ (n x n) fp32 matmul (2 n^3 FLOPs) on one thread, for each n.

    Timed with this thread's CPU time (other programs on the machine do not count), best of
    ``repeats`` rounds of enough calls to fill ``min_cpu_s``."""
    out = []
    with one_thread():
        for n in sizes:
            a, b = torch.randn(n, n), torch.randn(n, n)
            calls = max(1, int(2e7 / (2 * n**3)))  # a first guess; grown below
            a @ b  # warm-up
            best = float("inf")
            for _ in range(repeats):
                while True:
                    t0 = time.thread_time()
                    for _ in range(calls):
                        a @ b
                    dt = time.thread_time() - t0
                    if dt >= min_cpu_s:
                        break
                    calls *= 2
                best = min(best, dt / calls)
            out.append(
                MatmulRate(n=n, flops=2 * n**3, s_per_call=best, flops_per_s=2 * n**3 / best)
            )
    return out


@dataclass(frozen=True)
class MatmulRate:
    n: int
    flops: int
    s_per_call: float
    flops_per_s: float


class SlowDataset(torch.utils.data.Dataset):
    """Token batches that take ``delay_s`` each to 'load' (a sleep: a disk or a decoder)."""

    def __init__(self, n: int, rows: int, cfg: GPTConfig, delay_s: float) -> None:
        self.batches = token_batches(n, rows, cfg.seq_len, cfg.vocab_size, seed=2)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.delay_s)
        return self.batches[i]


def background_prefetch(batches: Iterable, depth: int = 2) -> Iterator:
    """Yield from ``batches`` while a thread loads up to ``depth`` batches ahead.

    A sleeping (I/O-bound) loader releases the GIL, so one thread is enough to overlap it with
    compute; CPU-heavy decoding needs processes (DataLoader(num_workers=k))."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()

    def fill() -> None:
        for b in batches:
            q.put(b)
        q.put(done)

    threading.Thread(target=fill, daemon=True).start()
    while (b := q.get()) is not done:
        yield b


@dataclass(frozen=True)
class LoaderStats:
    wait_s: float  # mean time waiting for the next batch
    compute_s: float  # mean time computing a step
    step_s: float  # mean step
    n: int  # steps measured (the first one is a warm-up, dropped)


def loader_experiment(loader: Iterable, cfg: GPTConfig = SCALING_CONFIG) -> LoaderStats:
    """Train a TinyGPT from ``loader``; per step: time waiting for data vs computing.
    The first step is a warm-up; returns best-of (compute) and mean (wait, step) times."""
    model = TinyGPT(cfg, seed=0)
    waits, computes, steps = [], [], []
    with one_thread():
        t_prev = time.perf_counter()
        for x, y in loader:
            t_data = time.perf_counter()
            lm_loss(model(x), y).backward()
            sgd_step(model)
            t_end = time.perf_counter()
            waits.append(t_data - t_prev)
            computes.append(t_end - t_data)
            steps.append(t_end - t_prev)
            t_prev = t_end
    waits, computes, steps = waits[1:], computes[1:], steps[1:]
    return LoaderStats(
        wait_s=sum(waits) / len(waits),
        compute_s=sum(computes) / len(computes),
        step_s=sum(steps) / len(steps),
        n=len(steps),
    )
