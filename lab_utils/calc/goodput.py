"""Goodput: the share of wall-clock time that trains the model, under failures (lab 11).

Pure Python (no torch): the formulas, a simulation that checks them, and the Llama 3 record.
Used by lab 11's notebook and by the goodput explorer (lab_utils/viz/goodput_explorer.py).
Every input goes through calc's checks: a bad one raises ValueError naming the argument.

A job computes for tau seconds, then stalls delta seconds to checkpoint, and repeats. Failures
arrive at random (a Poisson process, mean time between failures M for the WHOLE job). A failure
loses the work since the last complete checkpoint and costs R seconds to restart (detect, stop
the survivors, reschedule, start the processes, reload the checkpoint).

    expected_goodput(tau, delta, R, M)  exact expected value for exponential failures, including
                                 failures during checkpoints and restarts (Daly 2006, eq. 13):
                                 useful / wall = tau / (M e^(R/M) (e^((tau+delta)/M) - 1))
    goodput_first_order(...)     1 - delta/tau - (tau + delta)/(2M) - R/M: the three wastes
                                 (checkpoint stalls, half an interval lost per failure, restarts)
    young_interval(delta, M)     sqrt(2 delta M) (Young 1974): minimises the first order
    daly_interval(delta, M)      Daly 2006's higher-order optimum
    simulate(tau, delta, R, M, ...)  a discrete-event run with injected (random) failures
    replica_group_goodput(G, recovery, step, M)  fault tolerance beyond restart: G replica groups
                                 keep training while a failed one recovers (torchft's model)

Sources: J. W. Young, "A first order approximation to the optimum checkpoint interval", CACM
17(9), 1974; J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart
dumps", Future Generation Computer Systems 22(3), 2006. Llama Team, AI @ Meta, "The Llama 3
Herd of Models", 2024, Sec. 3.3.4 (466 interruptions in 54 days, 419 unexpected).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from lab_utils.calc._check import fields, nonneg_num, number, pos_int, pos_num, text, whole

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0

TAU = "tau (the checkpoint interval: seconds of compute between checkpoints)"
DELTA = "delta (the checkpoint stall, seconds)"
RESTART = "restart (the restart time R, seconds)"
MTBF = "mtbf (the mean time between failures M of the whole job, seconds)"


@dataclass(frozen=True)
class InterruptionRecord:
    """A published interruption record: `unexpected` failures in `days` of training."""

    name: str
    days: float  # the length of the record
    interruptions: int  # every interruption of the job, planned ones included
    unexpected: int  # the failures: the interruptions nobody planned
    gpus: int
    source: str

    def __post_init__(self) -> None:
        fields(self, text, ("name", "source"))
        fields(self, pos_num, ("days",))
        fields(self, pos_int, ("interruptions", "unexpected", "gpus"))
        if self.unexpected > self.interruptions:
            raise ValueError(
                f"InterruptionRecord.unexpected={self.unexpected} exceeds "
                f"InterruptionRecord.interruptions={self.interruptions}"
            )

    @property
    def mtbf_s(self) -> float:
        """Mean time between UNEXPECTED interruptions of the job, in seconds."""
        return self.days * DAY / self.unexpected


LLAMA3_405B = InterruptionRecord(
    name="Llama 3 405B pre-training",
    days=54,
    interruptions=466,
    unexpected=419,
    gpus=16384,
    source="Llama Team, AI @ Meta 2024, 'The Llama 3 Herd of Models', Sec. 3.3.4 and Table 5: "
    "466 job interruptions in a 54-day snapshot, 47 planned, 419 unexpected; "
    "more than 90% effective training time",
)


def _inputs(tau: float, delta: float, restart: float, mtbf: float) -> tuple[float, ...]:
    return (
        pos_num(TAU, tau),
        nonneg_num(DELTA, delta),
        nonneg_num(RESTART, restart),
        pos_num(MTBF, mtbf),
    )


def expected_goodput(tau: float, delta: float, restart: float, mtbf: float) -> float:
    """Expected useful fraction of wall time, exponential failures (lab 11).

    tau / (M e^(R/M) (e^((tau + delta)/M) - 1)): Daly 2006's complete model, eq. 13, which
    counts failures during checkpoints and restarts too. All arguments in seconds."""
    tau, delta, restart, mtbf = _inputs(tau, delta, restart, mtbf)
    x = (tau + delta) / mtbf
    if x > 700 or restart / mtbf > 700:  # e^x overflows: the job essentially never finishes
        return 0.0
    return tau / (mtbf * math.exp(restart / mtbf) * math.expm1(x))


def goodput_first_order(tau: float, delta: float, restart: float, mtbf: float) -> float:
    """1 - delta/tau - (tau + delta)/(2M) - R/M: the first-order expansion of ``expected_goodput``
    (Young 1974's waste terms plus restarts), valid while every term is small (lab 11)."""
    tau, delta, restart, mtbf = _inputs(tau, delta, restart, mtbf)
    return 1.0 - delta / tau - (tau + delta) / (2 * mtbf) - restart / mtbf


def young_interval(delta: float, mtbf: float) -> float:
    """sqrt(2 delta M): the tau that minimises delta/tau + tau/(2M) (Young 1974; lab 11)."""
    delta, mtbf = pos_num(DELTA, delta), pos_num(MTBF, mtbf)
    return math.sqrt(2 * delta * mtbf)


def daly_interval(delta: float, mtbf: float) -> float:
    """Daly 2006, eq. 37: sqrt(2dM) [1 + sqrt(d/2M)/3 + (d/2M)/9] - d for d < 2M, else M
    (d = delta, the stall; the interval that maximises ``expected_goodput``; lab 11)."""
    delta, mtbf = pos_num(DELTA, delta), pos_num(MTBF, mtbf)
    if delta >= 2 * mtbf:
        return mtbf
    r = delta / (2 * mtbf)
    return math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(r) / 3 + r / 9) - delta


@dataclass(frozen=True)
class Waste:
    """Where the wall time goes, first order, as fractions of wall time."""

    checkpoints: float  # delta / tau
    lost_work: float  # (tau + delta) / (2M): half an interval, on average, per failure
    restarts: float  # R / M

    @property
    def total(self) -> float:
        return self.checkpoints + self.lost_work + self.restarts


def waste(tau: float, delta: float, restart: float, mtbf: float) -> Waste:
    """The three first-order wastes: delta/tau, (tau + delta)/(2M), R/M (Young 1974; lab 11)."""
    tau, delta, restart, mtbf = _inputs(tau, delta, restart, mtbf)
    return Waste(delta / tau, (tau + delta) / (2 * mtbf), restart / mtbf)


@dataclass(frozen=True)
class Simulated:
    """One simulated job (SIMULATED time, seconds)."""

    wall_s: float
    useful_s: float
    failures: int
    checkpoints: int
    lost_s: float  # computed, then lost to failures
    restart_s: float  # spent restarting
    checkpoint_s: float  # spent in checkpoint stalls

    @property
    def goodput(self) -> float:
        return self.useful_s / self.wall_s


def simulate(
    tau: float, delta: float, restart: float, mtbf: float, horizon: float, seed: int = 0
) -> Simulated:
    """Run the job for `horizon` seconds of simulated wall time with injected failures.

    Failure times are drawn from an exponential distribution of mean `mtbf` (random.Random(seed):
    reproducible). A failure can strike while computing, while checkpointing (that checkpoint
    does not count) or while restarting (the restart starts over). Work counts as useful only
    once a checkpoint that holds it is complete. SIMULATED time: it checks ``expected_goodput``
    (lab 11)."""
    tau, delta, restart, mtbf = _inputs(tau, delta, restart, mtbf)
    horizon = number("horizon (simulated wall time, seconds)", horizon, 0, lo_open=True)
    seed = whole("seed", seed, 0)
    rng = random.Random(seed)
    t, useful, failures, ckpts, lost, restarting, stalled = 0.0, 0.0, 0, 0, 0.0, 0.0, 0.0
    next_failure = rng.expovariate(1 / mtbf)
    while t < horizon:
        segment = tau + delta  # compute, then write the checkpoint
        if t + segment <= min(next_failure, horizon):
            t += segment
            useful, ckpts, stalled = useful + tau, ckpts + 1, stalled + delta
            continue
        if next_failure >= horizon:  # the horizon ends mid-segment: stop there
            lost += min(horizon - t, tau)
            t = horizon
            break
        lost += min(next_failure - t, tau)  # the segment's work is gone
        stalled += max(0.0, next_failure - t - tau)
        t, failures = next_failure, failures + 1
        while True:  # restart; a failure during it starts it over
            next_failure = t + rng.expovariate(1 / mtbf)
            if t + restart <= next_failure:
                t, restarting = t + restart, restarting + restart
                break
            restarting += next_failure - t
            t, failures = next_failure, failures + 1
    return Simulated(t, useful, failures, ckpts, lost, restarting, stalled)


def replica_group_goodput(groups: int, recovery: float, step: float, mtbf: float) -> float:
    """Goodput when a failure stops ONE of ``groups`` data-parallel replica groups instead of the
    job (fault-tolerant HSDP, as torchft does it: the healthy groups go on with fewer replicas;
    the failed one rejoins by copying the weights from a live peer, no checkpoint reload).

        1 - (recovery + step) / (G M)

    Each failure (rate 1/M for the whole job) costs the failed group's recovery and its step in
    flight, i.e. 1/G of the job's throughput for that long. Compare ``expected_goodput`` for a
    job that stops and restarts from its last checkpoint. All times in seconds. Lab 11."""
    g = pos_int("groups", groups)
    recovery, step = nonneg_num("recovery (seconds)", recovery), pos_num("step (seconds)", step)
    mtbf = pos_num(MTBF, mtbf)
    return max(0.0, 1.0 - (recovery + step) / (g * mtbf))
