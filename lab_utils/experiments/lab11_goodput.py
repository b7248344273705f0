"""Goodput: the share of wall-clock time that trains the model, under failures (lab 11).

Pure Python (no torch): a calculator, a simulation that checks it, and the Llama 3 record.
(A calculator like those of lab_utils.calc; it lives here until calc/ takes it in.)

A job computes for tau seconds, then stalls delta seconds to checkpoint, and repeats. Failures
arrive at random (a Poisson process, mean time between failures M for the WHOLE job). A failure
loses the work since the last complete checkpoint and costs R seconds to restart (detect, stop
the survivors, reschedule, start the processes, reload the checkpoint).

    goodput(tau, delta, R, M)        exact expected value for exponential failures, including
                                     failures during checkpoints and restarts (Daly 2006, eq. 13):
                                     useful / wall = tau / (M e^(R/M) (e^((tau+delta)/M) - 1))
    goodput_first_order(...)         1 - delta/tau - (tau + delta)/(2M) - R/M: the three wastes
                                     (checkpoint stalls, half an interval lost per failure, restarts)
    young_interval(delta, M)         sqrt(2 delta M)           (Young 1974): minimises the first order
    daly_interval(delta, M)          Daly 2006's higher-order optimum
    simulate(tau, delta, R, M, ...)  a discrete-event run with injected (random) failures

Sources: J. W. Young, "A first order approximation to the optimum checkpoint interval", CACM
17(9), 1974; J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart
dumps", Future Generation Computer Systems 22(3), 2006. Llama Team, AI @ Meta, "The Llama 3
Herd of Models", 2024, Sec. 3.3.4 (466 interruptions in 54 days, 419 unexpected).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

HOUR, DAY = 3600.0, 86400.0


@dataclass(frozen=True)
class InterruptionRecord:
    """A published interruption record: `unexpected` failures in `days` of training."""

    name: str
    days: float
    interruptions: int
    unexpected: int
    gpus: int
    source: str

    @property
    def mtbf_s(self) -> float:
        """Mean time between UNEXPECTED interruptions of the job, in seconds."""
        return self.days * DAY / self.unexpected


LLAMA3_405B = InterruptionRecord(
    name="Llama 3 405B pre-training", days=54, interruptions=466, unexpected=419, gpus=16384,
    source="Llama Team, AI @ Meta 2024, 'The Llama 3 Herd of Models', Sec. 3.3.4 and Table 5: "
           "466 job interruptions in a 54-day snapshot, 47 planned, 419 unexpected; "
           "more than 90% effective training time")


def _positive(name: str, value: float, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} seconds, got {value!r}")
    return float(value)


def _check(tau: float, delta: float, restart: float, mtbf: float) -> None:
    _positive("the checkpoint interval tau", tau)
    _positive("the checkpoint stall delta", delta, allow_zero=True)
    _positive("the restart time R", restart, allow_zero=True)
    _positive("the mean time between failures M", mtbf)


def goodput(tau: float, delta: float, restart: float, mtbf: float) -> float:
    """Expected useful fraction of wall time (Daly 2006's complete model, exponential failures)."""
    _check(tau, delta, restart, mtbf)
    x = (tau + delta) / mtbf
    if x > 700 or restart / mtbf > 700:   # e^x overflows: the job essentially never finishes
        return 0.0
    return tau / (mtbf * math.exp(restart / mtbf) * math.expm1(x))


def goodput_first_order(tau: float, delta: float, restart: float, mtbf: float) -> float:
    """1 - delta/tau - (tau + delta)/(2M) - R/M: valid while every term is small."""
    _check(tau, delta, restart, mtbf)
    return 1.0 - delta / tau - (tau + delta) / (2 * mtbf) - restart / mtbf


def young_interval(delta: float, mtbf: float) -> float:
    """sqrt(2 delta M): the tau that minimises delta/tau + tau/(2M) (Young 1974)."""
    _positive("the checkpoint stall delta", delta)
    _positive("the mean time between failures M", mtbf)
    return math.sqrt(2 * delta * mtbf)


def daly_interval(delta: float, mtbf: float) -> float:
    """Daly 2006, eq. 37: sqrt(2dM) [1 + sqrt(d/2M)/3 + (d/2M)/9] - d for d < 2M, else M."""
    _positive("the checkpoint stall delta", delta)
    _positive("the mean time between failures M", mtbf)
    if delta >= 2 * mtbf:
        return mtbf
    r = delta / (2 * mtbf)
    return math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(r) / 3 + r / 9) - delta


@dataclass(frozen=True)
class Waste:
    """Where the wall time goes, first order, as fractions of wall time."""

    checkpoints: float      # delta / tau
    lost_work: float        # (tau + delta) / (2M): half an interval, on average, per failure
    restarts: float         # R / M

    @property
    def total(self) -> float:
        return self.checkpoints + self.lost_work + self.restarts


def waste(tau: float, delta: float, restart: float, mtbf: float) -> Waste:
    _check(tau, delta, restart, mtbf)
    return Waste(delta / tau, (tau + delta) / (2 * mtbf), restart / mtbf)


@dataclass(frozen=True)
class Simulated:
    """One simulated job (SIMULATED time, seconds)."""

    wall_s: float
    useful_s: float
    failures: int
    checkpoints: int
    lost_s: float           # computed, then lost to failures
    restart_s: float        # spent restarting
    checkpoint_s: float     # spent in checkpoint stalls

    @property
    def goodput(self) -> float:
        return self.useful_s / self.wall_s


def simulate(tau: float, delta: float, restart: float, mtbf: float, horizon: float,
             seed: int = 0) -> Simulated:
    """Run the job for `horizon` seconds of simulated wall time with injected failures.

    Failure times are drawn from an exponential distribution of mean `mtbf` (random.Random(seed):
    reproducible). A failure can strike while computing, while checkpointing (that checkpoint
    does not count) or while restarting (the restart starts over). Work counts as useful only
    once a checkpoint that holds it is complete."""
    _check(tau, delta, restart, mtbf)
    _positive("the horizon", horizon)
    rng = random.Random(seed)
    t, useful, failures, ckpts, lost, restarting, stalled = 0.0, 0.0, 0, 0, 0.0, 0.0, 0.0
    next_failure = rng.expovariate(1 / mtbf)
    while t < horizon:
        segment = tau + delta                       # compute, then write the checkpoint
        if t + segment <= min(next_failure, horizon):
            t += segment
            useful, ckpts, stalled = useful + tau, ckpts + 1, stalled + delta
            continue
        if next_failure >= horizon:                 # the horizon ends mid-segment: stop there
            lost += min(horizon - t, tau)
            t = horizon
            break
        lost += min(next_failure - t, tau)          # the segment's work is gone
        stalled += max(0.0, next_failure - t - tau)
        t, failures = next_failure, failures + 1
        while True:                                 # restart; a failure during it starts it over
            next_failure = t + rng.expovariate(1 / mtbf)
            if t + restart <= next_failure:
                t, restarting = t + restart, restarting + restart
                break
            restarting += next_failure - t
            t, failures = next_failure, failures + 1
    return Simulated(t, useful, failures, ckpts, lost, restarting, stalled)
