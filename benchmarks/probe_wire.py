"""What gloo really sends: every collective's wire bytes per rank against the ring formula.

    PYTHONPATH=. .venv/bin/python benchmarks/probe_wire.py [--ranks 2 3 4] [--mb 3]

One launch per world size. On each rank every collective runs once inside a CommLedger and a
WireMeter (``lab_utils.experiments.lab03.wire_per_collective``); the table shows, per
collective, the formula and the wire bytes of every rank (rank 0 / rank 1 / ...) and the
largest |wire / formula - 1| over the ranks the formula says send something. Then gloo's
per-message framing (send/recv of 4 B .. 4 MB) and the cost of entering + exiting a WireMeter.
Not a pass/fail benchmark: tests/test_measure_wire.py pins the same numbers.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

from lab_utils import run
from lab_utils.calc import ring_bytes_per_rank
from lab_utils.experiments.lab03 import wire_per_collective
from lab_utils.measure import GLOO_HEADER_BYTES, WireMeter
from lab_utils.runtime.launch import oversubscription_note
from lab_utils.viz import show_table


def framing_and_cost(ctx, sizes: list[int], reps: int = 200) -> dict:
    """Wire bytes of one send/recv (rank 0 -> 1) and one all-reduce per size; the seconds of
    enter + exit (empty block), and of reading sent_to the first time (store reads) and later."""
    framing = {}
    for size in sizes:
        x = torch.ones(size // 4)
        dist.barrier()
        with WireMeter(ctx) as p2p:
            if ctx.rank == 0:
                dist.send(x, 1)
            elif ctx.rank == 1:
                dist.recv(x, 0)
        dist.barrier()
        with WireMeter(ctx) as ar:
            dist.all_reduce(x)
        framing[size] = (p2p.sent, ar.sent)
    t0 = time.perf_counter()
    ar.sent_to
    first = time.perf_counter() - t0
    times, later = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        with WireMeter(ctx) as wire:
            pass
        times.append(time.perf_counter() - t0)
    for _ in range(20):  # a peer to name: one tiny all-reduce, then read sent_to
        dist.barrier()
        with WireMeter(ctx) as wire:
            dist.all_reduce(torch.ones(1))
        t0 = time.perf_counter()
        wire.sent_to
        later.append(time.perf_counter() - t0)
    return {
        "framing": framing,
        "enter_exit_s": statistics.median(times),
        "first_sent_to_s": first,
        "sent_to_s": statistics.median(later),
    }


def mb(values: list[float]) -> str:
    return " / ".join(f"{v / 1e6:.4f}" if v else "0" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--mb", type=float, default=3.0, help="tensor size, MB (1e6 bytes)")
    args = parser.parse_args()
    numel = int(args.mb * 1e6) // 4 // 24 * 24  # divisible by 2, 3, 4, 6, 8
    rows = []
    for n in args.ranks:
        per_rank = run(
            wire_per_collective, n, numel, timeout_s=300, quiet=True, preload=("torch._dynamo",)
        )  # CommLedger's first call imports it
        for i, sample in enumerate(per_rank[0]):
            samples = [per_rank[r][i] for r in range(n)]
            dev = max((abs(s.wire / s.formula - 1) for s in samples if s.formula), default=None)
            rows.append(
                {
                    "collective": sample.op,
                    "N": n,
                    "formula per rank": mb([s.formula for s in samples]),
                    "ledger per rank": mb([s.ledger for s in samples]),
                    "wire per rank": mb([s.wire for s in samples]),
                    "max |wire/formula - 1|": dev,
                }
            )
    show_table(
        rows,
        title=f"bytes each rank sent, float32 tensor of D = {4 * numel / 1e6:.3f} MB "
        "(gloo, torch " + torch.__version__ + ")",
        units={"formula per rank": "MB", "ledger per rank": "MB", "wire per rank": "MB"},
        fmt={"max |wire/formula - 1|": "{:.3%}"},
    )
    sizes = [4, 4096, 4 << 20]
    res = run(framing_and_cost, 2, sizes, timeout_s=300, quiet=True)
    rows = []
    for size in sizes:
        (send, ar), (recv, _) = res[0]["framing"][size], res[1]["framing"][size]
        formula = ring_bytes_per_rank("all_reduce", 2, size)
        rows.append(
            {
                "D": size,
                "send: sender": send,
                "- D": send - size,
                "receiver": recv,
                "all_reduce": ar,
                "- formula": ar - formula,
                "headers": (ar - formula) // GLOO_HEADER_BYTES,
            }
        )
    show_table(
        rows,
        title=f"gloo framing, 2 ranks: {GLOO_HEADER_BYTES}-byte header per message "
        "(wire bytes rank 0 sent; the receiver's are 'ready' messages)",
        units={"D": "B"},
    )
    show_table(
        [
            {
                "rank": r,
                "enter + exit": 1e6 * o["enter_exit_s"],
                "first sent_to": 1e6 * o["first_sent_to_s"],
                "sent_to": 1e6 * o["sent_to_s"],
            }
            for r, o in enumerate(res)
        ],
        title="WireMeter cost (median; first: store reads)",
        units={"enter + exit": "us", "first sent_to": "us", "sent_to": "us"},
    )
    note = oversubscription_note(2, "gloo")
    if note:
        print(note)


if __name__ == "__main__":
    main()
