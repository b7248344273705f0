"""Speed goal: our BucketDDP's step time within 1.25 x torch DDP's (tiny GPT, 4 ranks, gloo).

    cd /work/main && PYTHONPATH=. .venv/bin/python benchmarks/bench_ddp.py [--reps 9 --steps 10]

One launch: each rank builds the three wrappers (NaiveDDP, BucketDDP, torch DDP) around
identical models, warms them up, then runs `reps` rounds; in every round each wrapper trains
`steps` steps, ours and torch's back to back in alternating order. A round's time is the
SLOWEST rank's (a step ends when every rank has its averaged gradients). The goal is judged on
the median over rounds of (ours / torch) within a round: two runs a second apart see the same
load on a shared machine. The table also shows the median step time per implementation and
each rank's CPU time per step (time.process_time: the work done, steadier than the wall clock
when ranks share cores). Same buckets for ours and torch's (25 MB: the whole tiny GPT in one
bucket), so the ratio measures the implementation (Python hooks, copies into the flat buffer),
not the bucketing policy. Exit code 1 when the goal is missed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from lab_utils import run
from lab_utils.data import shard_for_rank, token_batches
from lab_utils.models import GPTConfig, TinyGPT, lm_loss
from lab_utils.parallel.data_parallel import BucketDDP, NaiveDDP
from lab_utils.reference import make_optimizer
from lab_utils.runtime.launch import oversubscription_note

CFG = GPTConfig(vocab_size=128, seq_len=32, n_layer=4, n_head=4, d_model=64)
GOAL = 1.25  # bucket / torch
IMPLS = ("naive", "bucket", "torch")


def bench(ctx, reps: int, steps: int, batch_per_rank: int, warmup: int = 3):
    batches = token_batches(4, batch_per_rank * ctx.world_size, CFG.seq_len, CFG.vocab_size)
    shards = [shard_for_rank(b, ctx.rank, ctx.world_size) for b in batches]
    wrappers = {
        "naive": NaiveDDP(TinyGPT(CFG)),
        "bucket": BucketDDP(TinyGPT(CFG)),
        "torch": DistributedDataParallel(TinyGPT(CFG)),
    }
    opts = {k: make_optimizer(w.parameters(), "adamw", 1e-3) for k, w in wrappers.items()}

    def step(impl: str, i: int) -> None:
        ddp, opt = wrappers[impl], opts[impl]
        x, y = shards[i % len(shards)]
        opt.zero_grad(set_to_none=True)
        lm_loss(ddp(x), y).backward()
        if impl != "torch":  # torch DDP has waited for its buckets at the end of backward
            ddp.finish_gradient_synchronization()
        opt.step()

    for impl in IMPLS:
        for i in range(warmup):
            step(impl, i)
    times: dict[str, list[float]] = {k: [] for k in IMPLS}
    cpu: dict[str, list[float]] = {k: [] for k in IMPLS}
    for rnd in range(reps):
        # ours and torch's back to back, in alternating order (a busy spell of the shared machine
        # then hits both alike); naive, ~5x slower, last
        pair = ("bucket", "torch") if rnd % 2 == 0 else ("torch", "bucket")
        for impl in pair + ("naive",):
            dist.barrier()  # every rank starts the round together
            t0, c0 = time.perf_counter(), time.process_time()
            for i in range(steps):
                step(impl, i)
            times[impl].append(time.perf_counter() - t0)
            cpu[impl].append(time.process_time() - c0)  # this rank's work, whoever had the cores
    n_params = sum(p.numel() for p in wrappers["torch"].parameters())
    return {
        "times": times,
        "cpu": cpu,
        "n_params": n_params,
        "n_buckets": len(wrappers["bucket"].buckets),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-per-rank", type=int, default=4)
    args = parser.parse_args()
    if args.reps < 5:
        parser.error("--reps must be at least 5 (the table reports a median)")
    results = run(
        bench,
        args.ranks,
        args.reps,
        args.steps,
        args.batch_per_rank,
        timeout_s=600,
        quiet=True,
        preload=("torch._dynamo",),
    )  # imported once, not per rank
    # a round lasts as long as its slowest rank
    per_round = {
        k: [max(r["times"][k][i] for r in results) / args.steps for i in range(args.reps)]
        for k in IMPLS
    }
    med = {k: statistics.median(v) for k, v in per_round.items()}
    cpu = {
        k: statistics.median(c / args.steps for r in results for c in r["cpu"][k]) for k in IMPLS
    }
    info = results[0]
    print(
        f"DDP step time: TinyGPT {info['n_params']:,} params "
        f"({info['n_params'] * 4 / 1e3:.0f} kB of fp32 gradients), {args.ranks} ranks "
        f"({results.backend}), batch {args.batch_per_rank}/rank x seq {CFG.seq_len}; median of "
        f"{args.reps} rounds x {args.steps} steps; BucketDDP used {info['n_buckets']} bucket(s)"
    )
    print(
        f"{'implementation':<16}{'median ms/step':>16}{'min':>10}{'max':>10}{'vs torch':>10}"
        f"{'CPU ms/step/rank':>18}{'vs torch':>10}"
    )
    for k, name in (("naive", "NaiveDDP"), ("bucket", "BucketDDP"), ("torch", "torch DDP")):
        v = [1e3 * t for t in per_round[k]]
        print(
            f"{name:<16}{statistics.median(v):>16.2f}{min(v):>10.2f}{max(v):>10.2f}"
            f"{med[k] / med['torch']:>9.2f}x{1e3 * cpu[k]:>18.2f}{cpu[k] / cpu['torch']:>9.2f}x"
        )
    # The goal is judged on back-to-back pairs: each round's ratio compares two runs a second
    # apart, so a busy spell of the shared machine cancels; the ratio of the two medians does not.
    ratio = statistics.median(b / t for b, t in zip(per_round["bucket"], per_round["torch"]))
    verdict = "MET" if ratio <= GOAL else "MISSED"
    print(
        f"goal: BucketDDP <= {GOAL} x torch DDP, median over rounds of the per-round ratio -> "
        f"{ratio:.2f} x: {verdict}  (ratio of the medians {med['bucket'] / med['torch']:.2f} x; "
        f"CPU time per rank {cpu['bucket'] / cpu['torch']:.2f} x)"
    )
    note = oversubscription_note(args.ranks, results.backend)
    if note:
        print(note)
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
