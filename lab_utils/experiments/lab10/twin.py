"""Lab 10 on two clocks: strong and weak scaling of the same DDP code, on this machine and on an
emulated GPU cluster (``lab_utils.twin``).

    scaling_steps(ctx, sizes, ...)   strong + weak scaling of a BucketDDP TinyGPT at each N in
                                     ``sizes``, in ONE launch; under ``lab_utils.run`` its times
                                     are this machine's wall clock, under ``twin.emulate`` the
                                     emulated cluster's clock (the code is the same)
    scaling_cluster(max_n)           the lab's cluster: DGX H100 nodes, half the ranks on each
    scaling_scale(cfg, tokens)       the lab's Scale: a GPT-2 XL's FLOPs and gradient bytes
    amdahl_curve(res, sizes, label)  the strong-scaling curve and its Amdahl fit
    bubble_steps(ctx, ms)            lab 07's 1F1B step (real compute) for each m, marked on the
                                     emulated clock; ``bubbles(em)`` its idle share per m,
                                     ``bubble_window(em, i)`` the i-th step (for twin.figure)
    bubble_cluster() / bubble_scale()   2 GPUs of one DGX H100 node; each layer charged as a
                                     full-width one (lab 06's ``layer_scale``)

The emulated clock replaces the "simulated devices" (ranks sleeping for their compute) and the
pipeline's slept compute this lab used before: compute is charged from the FLOPs each rank really
ran, the all-reduce and the stages' sends from the links they cross, and overlap comes out of
BucketDDP's own buckets.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import torch.distributed as dist

from lab_utils import twin
from lab_utils.calc import bubble_from_timeline, fit_serial_fraction
from lab_utils.data import shard_for_rank, token_batches
from lab_utils.experiments.common import clock_now, emulated_window, sgd_step
from lab_utils.experiments.lab06.twin import layer_scale
from lab_utils.experiments.lab07 import PP_CONFIG, pipeline_step
from lab_utils.experiments.lab10 import CurveFit, RunStats, ScalingResults
from lab_utils.experiments.lab10.local import SCALING_CONFIG
from lab_utils.models import GPTConfig, TinyGPT, count_params, lm_loss
from lab_utils.parallel.data_parallel import BucketDDP

FULL_MODEL = "gpt2-xl"  # whose FLOPs and gradient bytes the emulated clock charges
FULL_TOKENS = 2**17  # its global batch per step (tokens): 128 Ki tokens


def _train(ctx: Any, group: Any, n: int, rows: int, steps: int, cfg: GPTConfig) -> RunStats | None:
    """``steps`` BucketDDP steps (after one warm-up) on ranks 0..n-1, ``rows`` sequences each.
    comm_s is the wait in ``finish_gradient_synchronization``: communication NOT hidden behind
    backward. Rank 0 returns its fastest step; every step's time is in ``log_s``."""
    model = TinyGPT(cfg, seed=0)
    ddp = BucketDDP(model, group=group, broadcast_buffers=False)
    logs, cpus, comms, losses = [], [], [], []
    for batch in token_batches(steps + 1, n * rows, cfg.seq_len, cfg.vocab_size, seed=1):
        x, y = shard_for_rank(batch, ctx.rank, n)  # this rank's rows: (rows, T)
        dist.barrier(group=group)  # every rank starts the step together
        t0, c0 = clock_now(), time.process_time()
        loss = lm_loss(ddp(x), y)
        loss.backward()  # buckets launch their all-reduce as their gradients arrive
        t1 = clock_now()
        ddp.finish_gradient_synchronization()  # wait for what did not overlap
        comms.append(clock_now() - t1)
        sgd_step(model)
        logs.append(clock_now() - t0)
        cpus.append(time.process_time() - c0)
        mean_loss = loss.detach().clone()  # the global batch's mean loss (after the step)
        dist.all_reduce(mean_loss, group=group)
        losses.append(mean_loss.item() / n)
    if ctx.rank != 0:
        return None
    best = 1 + min(range(steps), key=logs[1:].__getitem__)
    return RunStats(
        n=n,
        rows=rows,
        tokens=n * rows * cfg.seq_len,
        step_s=logs[best],
        cpu_s=min(cpus[1:]),
        comm_s=comms[best],
        log_s=tuple(logs),
        losses=tuple(losses),
    )


def scaling_steps(
    ctx: Any,
    sizes: Sequence[int],
    global_batch: int = 32,
    per_rank_batch: int = 8,
    steps: int = 4,
    cfg: GPTConfig = SCALING_CONFIG,
) -> ScalingResults | None:
    """Strong scaling (``global_batch / N`` rows per rank) and weak scaling (``per_rank_batch``
    rows per rank) at every N in ``sizes``: ONE launch of max(sizes) ranks, the run at N on a
    subgroup of ranks 0..N-1 while the others wait in a barrier. Rank 0 returns the results."""
    groups = {n: dist.new_group(list(range(n))) for n in sizes}  # every rank creates every group
    runs: dict[str, dict[int, RunStats]] = {}
    for mode in ("strong", "weak"):
        for n in sizes:
            rows = global_batch // n if mode == "strong" else per_rank_batch
            if ctx.rank < n:
                stats = _train(ctx, groups[n], n, rows, steps, cfg)
                if stats is not None:
                    runs.setdefault(mode, {})[n] = stats
            dist.barrier()  # the idle ranks wait here
    return ScalingResults(runs) if ctx.rank == 0 else None


def scaling_cluster(max_n: int, preset: str = "DGX H100") -> twin.Cluster:
    """``max_n`` GPUs on 2 nodes (1 node for max_n = 1): the largest N crosses the network."""
    nodes = 1 if max_n == 1 else 2
    if max_n % nodes:
        raise ValueError(f"max_n={max_n} GPUs do not split evenly over {nodes} nodes")
    return twin.Cluster.preset(preset, nodes=nodes, gpus_per_node=max_n // nodes)


def scaling_scale(cfg: GPTConfig, global_batch: int) -> twin.Scale:
    """Charge FULL_MODEL's FLOPs (FULL_TOKENS per step) and gradient bytes for the lab model's
    step of ``global_batch`` sequences (``twin.Scale.model``)."""
    tiny = count_params(TinyGPT(cfg))
    per_token = twin.Scale.model(FULL_MODEL, tiny, cfg.n_layer, cfg.d_model, cfg.seq_len)
    tokens = FULL_TOKENS / (global_batch * cfg.seq_len)  # the full run's tokens per step, over ours
    return twin.Scale(
        per_token.flops * tokens,
        per_token.bytes,
        f"{per_token.name}, x{tokens:.3g} tokens per step",
    )


def amdahl_curve(res: ScalingResults, sizes: Sequence[int], label: str) -> CurveFit:
    """The strong-scaling curve (best step per N) and its Amdahl fit, or why there is none."""
    times = tuple(res.get("strong", n).step_s for n in sizes)
    try:
        return CurveFit(label, tuple(sizes), times, fit_serial_fraction(list(sizes), list(times)))
    except ValueError as e:  # e.g. the times do not fall with N
        return CurveFit(label, tuple(sizes), times, None, str(e).split(";")[0])


def bubble_steps(
    ctx: Any, ms: Sequence[int], micro_batch: int = 2
) -> list[tuple[int, float | None, float | None]]:
    """Lab 07's 1F1B step on p = world-size stages (real compute) for each m in
    ``ms``: a warm-up, then one step between two ``twin.step()`` marks. Returns
    [(m, start, end)] on this rank's emulated clock (Nones outside an emulated run)."""
    out = []
    for m in ms:
        pipeline_step(ctx, "1f1b", m=m, micro_batch=micro_batch)  # warm-up
        start = twin.step()
        pipeline_step(ctx, "1f1b", m=m, micro_batch=micro_batch)
        out.append((m, start, twin.step()))
    return out


def bubble_window(em: twin.Emulation, i: int) -> twin.Emulation:
    """The ``i``-th measured step of a ``bubble_steps`` run, from 0 (what ``twin.figure`` draws)."""
    return emulated_window(em, [rec.result[i][1:] for rec in em.records])


def bubbles(em: twin.Emulation) -> dict[int, float]:
    """{m: mean idle share of the ranks' compute streams} of a ``bubble_steps`` run, over each
    measured step (``calc.bubble_from_timeline``, global window)."""
    out = {}
    for i, (m, *_) in enumerate(em.results[0]):
        spans = bubble_window(em, i).spans
        out[m] = bubble_from_timeline([s for s in spans if s["stream"] == "compute"]).mean
    return out


def bubble_cluster(p: int = 2, preset: str = "DGX H100") -> twin.Cluster:
    """``p`` GPUs of one ``preset`` node: one per pipeline stage, NVLink between them."""
    return twin.Cluster.preset(preset, nodes=1, gpus_per_node=p)


def bubble_scale(micro_batch: int = 2, cfg: GPTConfig = PP_CONFIG) -> twin.Scale:
    """Each of lab 07's tiny layers charged as a full-width one (h = 4096, s = 2048): the
    stages' compute and their activation messages in a real model's proportions."""
    return layer_scale(cfg, micro_batch)
