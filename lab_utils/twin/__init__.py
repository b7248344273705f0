"""The emulated GPU cluster: the learner's REAL distributed code, on a GPU cluster's clock.

    from lab_utils import twin

    def train(ctx, steps):                       # ordinary distributed code (gloo ranks)
        model = DDP(make_model())                # torch DDP, FSDP2, pipelining, lab_utils.parallel
        for _ in range(steps):
            model(x).sum().backward(); opt.step(); opt.zero_grad()
            twin.step()                          # mark a step on the emulated clock
        return loss

    cluster = twin.Cluster.preset("DGX H100", nodes=2, gpus_per_node=2)   # 4 GPUs, 2 nodes
    em = twin.emulate(train, 4, cluster, 3)      # like lab_utils.run: pooled or cold=True
    em.results                                   # each rank's return value (real numbers)
    em.step_times()                              # EMULATED seconds per step (slowest rank)
    twin.figure(em).show()                       # per-rank compute / comm / idle Gantt
    twin.chrome_trace(em, "step.json")           # open in ui.perfetto.dev
    cluster.with_(inter=twin.Link("10GbE", 50e-6, 1.25e9))   # change the cluster, re-run

Index (one concept per file):
    topology   Cluster (nodes x GPUs, GPU peak x efficiency, intra/inter Link), presets from
               calc.hardware.CLUSTER_SPECS (vendor data sheets), Span of a group
    clock      RankClock: virtual time of one rank, compute / comm / p2p / io streams, the rules
    backend    EmulatedGroup: the "twin" process-group backend (gloo data, emulated time)
    compute    ComputeCharge: FLOPs counted per op (torch's flop registry) -> compute time
    scale      Scale: charge a full-size model's FLOPs / bytes while a tiny model runs
    session    the emulation in progress on a rank; unknown calls reported once
    emulate    emulate(fn, world_size, cluster, *args): the entry point
    result     Emulation / RankRecord: results, spans, step times, busy and overlap
    trace      timeline_events, figure (Gantt view), chrome_trace (Perfetto)
    validate   the emulator against calc's analytic model and published measurements
               (``python -m lab_utils twin validate``)
    widget     ClusterExplorer: the learner picks the cluster, commits a prediction, a real
               step re-runs and its timeline is redrawn (``from lab_utils.twin.widget import``)

How it was built (the sketch in shared/designs/emulated_cluster.md, kept where it held, changed
where a probe on torch 2.13 said otherwise):
* a Python ProcessGroup registered as backend "twin" forwards to gloo (the data is real);
* the twin world group REPLACES the default group for the call and is restored after, so code
  that never names a group (dist.all_reduce(t), DDP, init_device_mesh) is seen, pooled or cold;
  a sub-group made with an explicit backend="gloo" is not, and its calls are reported;
* collective start = MAX of the participants' ready times, by a one-number gloo all-reduce on a
  side group (1.55 ms of wall per call on 8 ranks, benchmarks/bench_twin.py);
* point-to-point carries the sender's start IN the message (8 bytes in front): a header on the
  side group, as sketched, deadlocked a pipeline under load;
* DDP never waits on its works from Python: work issued inside a backward pass is joined when
  that backward ends (autograd's queue_callback), which is where DDP and FSDP2 wait;
* unmodelled calls (gather, scatter, ...) still run on gloo; a dispatch mode sees their c10d op
  and reports each name once.

Every time this package reports is EMULATED (seconds of the virtual clock); the wall clock of
this machine never enters, so a loaded machine gives the same numbers.
"""

from __future__ import annotations

from lab_utils.twin import session as _session
from lab_utils.twin.emulate import emulate
from lab_utils.twin.result import Emulation
from lab_utils.twin.scale import Scale
from lab_utils.twin.topology import Cluster, Link
from lab_utils.twin.trace import chrome_trace, figure, timeline_events


def step() -> float | None:
    """Mark the end of a training step on this rank: wait for its outstanding communication
    and record the emulated time. Returns it; None (and does nothing) outside an emulated run,
    so the same worker runs unchanged under ``lab_utils.run``."""
    s = _session.current()
    return None if s is None else s.clock.mark_step()


def io(seconds: float, name: str = "write", nbytes: float = 0.0, wait: bool = True) -> float | None:
    """Charge ``seconds`` of storage or host-copy work (a checkpoint write, a staging copy) on
    this rank's "io" stream; ``wait=False`` lets it run in the background (an async save), and
    step marks do not wait for it. Returns its end; None outside an emulated run."""
    s = _session.current()
    return None if s is None else s.clock.io(seconds, name, nbytes, wait)


def now() -> float | None:
    """This rank's emulated time in seconds (None outside an emulated run)."""
    s = _session.current()
    return None if s is None else s.clock.now


__all__ = [
    "Cluster",
    "Emulation",
    "Link",
    "Scale",
    "chrome_trace",
    "emulate",
    "figure",
    "io",
    "now",
    "step",
    "timeline_events",
]
