"""Lab 10's experiments: scaling curves and the four bottleneck families, measured.

    scaling_worker(ctx, sizes, ...)   strong + weak scaling of a DDP TinyGPT at N = 1, 2, 4(, 8)
                                      ranks, real compute and simulated devices, in ONE launch
    bottleneck_worker(ctx, ...)       2 ranks: a compute-bound vs a communication-bound step
                                      (Timeline + CommLedger); a measured pipeline bubble
    matmul_rates(sizes)               FLOP/s of square matmuls in this process (small = slow)
    loader_experiment(...)            a data loader that sleeps, fixed by prefetching

Timing rules, because the labs run on shared laptops: every time is the BEST of several steps
(the one least disturbed by other programs); in-process benchmarks use this thread's CPU time.
One rank = one device = one core: the ranks run one intra-op thread each (``threads=1``).
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any, Iterable, Iterator, Sequence

import torch
import torch.distributed as dist

from lab_utils.data import shard_for_rank, token_batches
from lab_utils.parallel.data_parallel import BucketDDP
from lab_utils.measure import CommLedger, Timeline
from lab_utils.models import GPTConfig, TinyGPT, ToyMLP, count_params, lm_loss

SCALING_CONFIG = GPTConfig(vocab_size=64, seq_len=32, n_layer=2, n_head=4, d_model=64)


def _flat_grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


@torch.no_grad()
def sgd_step(model: torch.nn.Module, lr: float = 0.1) -> None:
    """Plain SGD, written out: the first torch.optim optimizer a process builds imports the
    compiler stack (torch._dynamo, ~1.5 s per rank), which would dwarf these tiny steps."""
    for p in model.parameters():
        if p.grad is not None:
            p.add_(p.grad, alpha=-lr)
            p.grad = None


def _train(ctx: Any, group: Any, n: int, rows: int, steps: int, cfg: GPTConfig,
           sim_row_s: float | None) -> dict | None:
    """``steps`` data-parallel steps on the first ``n`` ranks, ``rows`` sequences per rank.

    Real mode: lab 04's BucketDDP (gradient buckets all-reduced during backward; the time left
    in ``finish_gradient_synchronization`` is communication NOT hidden behind backward).
    Simulated-device mode (``sim_row_s``): compute is a SLEEP of rows x sim_row_s seconds (a
    device busy elsewhere; sleeping ranks do not compete for this machine's cores),
    communication is the REAL all-reduce of the model's gradient buffer (2(n-1)/n x 4P bytes).
    Returns rank 0's best step (wall and CPU time), its exposed communication, and the mean
    loss over the global batch at every step (real mode).
    """
    model = TinyGPT(cfg, seed=0)
    ddp = BucketDDP(model, group=group, broadcast_buffers=False) if sim_row_s is None else None
    batches = token_batches(steps + 1, n * rows, cfg.seq_len, cfg.vocab_size, seed=1)
    flat = torch.zeros(count_params(model))
    walls, cpus, comms, losses = [], [], [], []
    for i, batch in enumerate(batches):  # step 0 is a warm-up: first-call costs, not timed
        x, y = shard_for_rank(batch, ctx.rank, n)  # this rank's rows: (rows, T)
        dist.barrier(group=group)  # every rank starts the step together
        t0, c0 = time.perf_counter(), time.process_time()
        if ddp is not None:
            loss = lm_loss(ddp(x), y)
            loss.backward()  # buckets launch their all-reduce as their gradients arrive
            t1 = time.perf_counter()
            ddp.finish_gradient_synchronization()  # wait for what did not overlap
        else:
            time.sleep(rows * sim_row_s)  # the simulated device computes
            t1 = time.perf_counter()
            dist.all_reduce(flat, group=group)  # the real gradient all-reduce
        t_comm = time.perf_counter() - t1
        sgd_step(model)
        if i > 0:
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            comms.append(t_comm)
        if ddp is not None:  # the global batch's mean loss (untimed): the same for every N
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss, group=group)
            losses.append(mean_loss.item() / n)
    if ctx.rank != 0:
        return None
    best = min(range(steps), key=walls.__getitem__)
    return dict(n=n, rows=rows, tokens=n * rows * cfg.seq_len, step_s=walls[best],
                cpu_s=min(cpus), comm_s=comms[best], steps_s=walls, losses=losses)


def scaling_worker(ctx: Any, sizes: Sequence[int], global_batch: int = 32,
                   per_rank_batch: int = 8, steps: int = 5, cfg: GPTConfig = SCALING_CONFIG,
                   sim_row_s: float = 0.004) -> dict | None:
    """Strong scaling (global batch fixed, ``global_batch / N`` rows per rank) and weak scaling
    (``per_rank_batch`` rows per rank, global batch N x larger), at every N in ``sizes``, with
    real compute and with simulated devices. ONE launch of max(sizes) ranks: the run at N uses
    a subgroup of ranks 0..N-1 while the others wait in a barrier (blocked, using no CPU).
    Rank 0 returns {(mode, N): result}; ``mode`` in strong, weak, sim_strong, sim_weak.
    """
    groups = {n: dist.new_group(list(range(n))) for n in sizes}  # every rank creates every group
    out = {}
    for mode in ("strong", "weak", "sim_strong", "sim_weak"):
        for n in sizes:
            rows = global_batch // n if mode.endswith("strong") else per_rank_batch
            if ctx.rank < n:
                out[(mode, n)] = _train(ctx, groups[n], n, rows, steps, cfg,
                                        sim_row_s if mode.startswith("sim") else None)
            dist.barrier()  # the idle ranks wait here
    return out if ctx.rank == 0 else None


def _comm_vs_compute(ctx: Any, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                     loss_fn: Any, steps: int) -> dict:
    """Forward+backward, then ONE all-reduce of the flat gradient (naive DDP: nothing
    overlaps), each step in Timeline spans. The CommLedger watches the untimed warm-up step:
    its first use loads torch's dispatch machinery (~1-2 s), which must stay out of timings."""
    tl, ledger = Timeline(ctx), CommLedger()
    spans = []
    for i in range(steps + 1):  # step 0: warm-up
        tl.events.clear()
        dist.barrier()
        with tl.span("compute"):
            loss_fn(model(x), y).backward()
        flat = _flat_grads(model)
        with ledger if i == 0 else contextlib.nullcontext(), tl.span("all_reduce"):
            dist.all_reduce(flat)
        sgd_step(model)
        if i > 0:
            spans.append({e["name"]: e["end"] - e["start"] for e in tl.events})
    return dict(params=count_params(model), grad_bytes=flat.numel() * flat.element_size(),
                rows=int(x.shape[0]), spans=spans, bytes_sent=ledger.bytes_sent("all_reduce"),
                calls=ledger.count("all_reduce"), events=list(tl.events))


def comm_split(per_rank: Sequence[dict]) -> dict:
    """Combine the ranks' spans of ``_comm_vs_compute``. Per step, compute = the slowest
    rank's compute and transfer = the SHORTEST all-reduce span (the last rank to arrive waits
    for nobody: its span is the transfer itself; the others' spans add waiting for it). Each
    is the best over the steps; comm_fraction = transfer / (compute + transfer)."""
    steps = range(len(per_rank[0]["spans"]))
    compute = min(max(r["spans"][k]["compute"] for r in per_rank) for k in steps)
    transfer = min(min(r["spans"][k]["all_reduce"] for r in per_rank) for k in steps)
    return dict(compute_s=compute, comm_s=transfer, comm_fraction=transfer / (compute + transfer))


def bottleneck_worker(ctx: Any, steps: int = 6, bubble_ms: Sequence[int] = (2, 8),
                      t_f: float = 0.02) -> dict:
    """Two ranks. (1) Compute-bound: TinyGPT, 16 sequences per rank. Communication-bound: a
    wide ToyMLP (6.3M parameters, 25 MB of fp32 gradients) on 2 rows per rank. (2) A 2-stage
    1F1B pipeline (lab 07's ``pipeline_step``, simulated compute t_f) for each m in
    ``bubble_ms``: its measured per-rank timeline. Every rank returns its own results."""
    from lab_utils.parallel.pipeline_parallel.schedules import SimCompute, pipeline_step

    cfg = SCALING_CONFIG
    x, y = shard_for_rank(token_batches(1, 32, cfg.seq_len, cfg.vocab_size, seed=1)[0],
                          ctx.rank, ctx.world_size)
    mlp = ToyMLP(d_in=512, d_hidden=2048, d_out=512, n_layers=3, seed=0)
    g = torch.Generator().manual_seed(ctx.rank)
    xm, ym = torch.randn(2, 512, generator=g), torch.randn(2, 512, generator=g)
    out = {"compute-bound": _comm_vs_compute(ctx, TinyGPT(cfg, seed=0), x, y, lm_loss, steps),
           "communication-bound": _comm_vs_compute(ctx, mlp, xm, ym,
                                                   torch.nn.functional.mse_loss, steps)}
    out["pipeline"] = {m: pipeline_step(ctx, "1f1b", m=m, sim=SimCompute(t_f=t_f))["events"]
                       for m in bubble_ms}
    return out


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread here (one core = one 'device', like each rank)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def matmul_rates(sizes: Sequence[int] = (16, 32, 64, 128, 256, 512, 1024),
                 min_cpu_s: float = 0.05, repeats: int = 3) -> list[dict]:
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
            out.append(dict(n=n, flops=2 * n**3, s_per_call=best, flops_per_s=2 * n**3 / best))
    return out


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


def loader_experiment(loader: Iterable, cfg: GPTConfig = SCALING_CONFIG) -> dict:
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
    return dict(wait_s=sum(waits) / len(waits), compute_s=sum(computes) / len(computes),
                step_s=sum(steps) / len(steps), n=len(steps))
