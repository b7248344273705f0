"""Exercise "fit_serial_fraction" (lab 10): Amdahl's serial fraction from logged step times.

A scaling run logs, for every N, the time of each training step. The first step of a run pays
one-off costs (allocations, lazy imports, autotuning) that do not shrink with N, and now and
then a step is disturbed (a garbage collection, a noisy neighbour). The learner writes

    fn(logs: list[StepLog]) -> float        # s, the serial fraction of T(N) = a + b/N

turning each N's log into one representative step time and fitting T(N) = a + b/N by least
squares (a straight line in 1/N): s = a / (a + b), the serial share of the one-device time.
Checked on three logs: N = 1, 2, 4, 8 with a warm-up step and one disturbed step; N = 2, 4,
8, 16 (no one-rank run was logged: T(1) = a + b must come from the fit); and a clean log.
"""

from __future__ import annotations

import random

from lab_utils.exercises._core import Exercise, Verdict, register
from lab_utils.experiments.lab10 import StepLog


def representative(log: StepLog) -> float:
    """Drop the warm-up step, take the median: one disturbed step cannot move it."""
    steady = sorted(log.step_s[1:])
    mid = len(steady) // 2
    return steady[mid] if len(steady) % 2 else (steady[mid - 1] + steady[mid]) / 2


def fit_serial(logs: list[StepLog]) -> float:
    """Least squares of T = a + b x with x = 1/N; s = a / (a + b) (T(1) = a + b, fitted)."""
    xs = [1 / log.n for log in logs]
    ts = [representative(log) for log in logs]
    mx, mt = sum(xs) / len(xs), sum(ts) / len(ts)
    b = sum((x - mx) * (t - mt) for x, t in zip(xs, ts)) / sum((x - mx) ** 2 for x in xs)
    a = mt - b * mx
    return a / (a + b)


# ----------------------------------------------------------------------------- wrong versions
def wrong_mean_with_warmup(logs: list[StepLog]) -> float:
    """Averages every step, warm-up included: its one-off cost looks like serial time."""
    return _fit([1 / g.n for g in logs], [sum(g.step_s) / len(g.step_s) for g in logs])


def wrong_mean_of_steps(logs: list[StepLog]) -> float:
    """Drops the warm-up but averages: one disturbed step drags its N's point."""
    return _fit([1 / g.n for g in logs], [sum(g.step_s[1:]) / (len(g.step_s) - 1) for g in logs])


def wrong_two_points(logs: list[StepLog]) -> float:
    """Inverts Amdahl from the first and last log, assuming the first is N = 1."""
    t1, tn, n = representative(logs[0]), representative(logs[-1]), logs[-1].n
    return (tn / t1 - 1 / n) / (1 - 1 / n)


def wrong_linear_in_n(logs: list[StepLog]) -> float:
    """Fits T = a + b N (a line in N, not in 1/N)."""
    ns = [float(g.n) for g in logs]
    ts = [representative(g) for g in logs]
    mn, mt = sum(ns) / len(ns), sum(ts) / len(ts)
    b = sum((x - mn) * (t - mt) for x, t in zip(ns, ts)) / sum((x - mn) ** 2 for x in ns)
    a = mt - b * mn
    return a / ts[0]


def _fit(xs: list[float], ts: list[float]) -> float:
    mx, mt = sum(xs) / len(xs), sum(ts) / len(ts)
    b = sum((x - mx) * (t - mt) for x, t in zip(xs, ts)) / sum((x - mx) ** 2 for x in xs)
    a = mt - b * mx
    return a / (a + b)


# ----------------------------------------------------------------------------- the grader
CASES = (  # (name, N values, true s, T1 seconds, steps per N, warm-up extra s, spikes {N: extra s})
    (
        "N = 1, 2, 4, 8: warm-up step + one disturbed step at N = 8",
        (1, 2, 4, 8),
        0.05,
        0.40,
        6,
        0.50,
        {8: 0.30},
    ),
    (
        "N = 2, 4, 8, 16: no one-rank log, disturbed steps at N = 2 and 16",
        (2, 4, 8, 16),
        0.20,
        1.00,
        8,
        0.80,
        {2: 0.50, 16: 0.40},
    ),
    ("N = 1, 3, 6, 12: a clean log", (1, 3, 6, 12), 0.10, 0.60, 5, 0.0, {}),
)
TOLERANCE = 0.01  # absolute, on s


def make_logs(
    ns, s: float, t1: float, steps: int, warmup_s: float, spikes: dict, seed: int = 0
) -> list[StepLog]:
    """Synthetic logs of T(N) = t1 (s + (1 - s)/N), each step jittered by +-1%; step 0 pays
    `warmup_s` extra; at each N in `spikes`, one steady step pays that much extra."""
    rng = random.Random(seed)
    logs = []
    for n in ns:
        base = t1 * (s + (1 - s) / n)
        times = [base * (1 + rng.uniform(-0.01, 0.01)) for _ in range(steps)]
        times[0] += warmup_s
        if n in spikes:
            times[rng.randrange(1, steps)] += spikes[n]
        logs.append(StepLog(n, tuple(times)))
    return logs


def check(ctx, fn) -> Verdict:
    for k, (name, ns, s, t1, steps, warm, spikes) in enumerate(CASES):
        logs = make_logs(ns, s, t1, steps, warm, spikes, seed=k)
        got = fn(list(logs))
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return Verdict.fail(f"{name}: return s as a float, got {got!r}")
        if abs(got - s) > TOLERANCE:
            return Verdict.fail(
                f"{name}: s = {got:.4f}, expected {s:.4f} +- {TOLERANCE}. " + _why(got, s, logs)
            )
    return Verdict.ok(
        "s within 0.01 of the truth on all three logs (warm-up, disturbed steps, no one-rank run)"
    )


def _why(got: float, s: float, logs: list[StepLog]) -> str:
    """Name the likely mistake: the answer matches what a known mistake gives on this log."""

    def same(f) -> bool:
        try:
            return abs(f(logs) - got) < 1e-6
        except (ZeroDivisionError, ValueError, IndexError):
            return False

    if same(wrong_linear_in_n):
        return "Amdahl's T(N) = a + b/N is a straight line in 1/N, not in N."
    if same(wrong_mean_with_warmup):
        return (
            "The warm-up step counts: its one-off cost does not shrink with N, so it looks "
            "like serial time. Leave step 0 out."
        )
    if same(lambda lg: _fit([1 / g.n for g in lg], [g.step_s[0] for g in lg])):
        return (
            "You fitted the FIRST step of each run: that is the warm-up (compilation, "
            "allocation), the one step to leave out; fit the median of the others."
        )
    if same(wrong_mean_of_steps):
        return "A mean moves with one disturbed step; a median (or the best step) does not."
    if logs[0].n != 1:
        return (
            "This log has no N = 1 run: T(1) is not measured; it is the fit's a + b. "
            "A formula that reads T(1) from the first log goes wrong."
        )
    return "Fit T(N) = a + b/N over EVERY N (least squares in x = 1/N), then s = a / (a + b)."


register(
    Exercise(
        name="fit_serial_fraction",
        lab="10_scaling",
        summary="Amdahl's serial fraction s from logged per-step times at several N",
        signature="fn(logs: list[StepLog(n, step_s)]) -> float",
        check=check,
        reference=fit_serial,
        wrong={
            "mean of every step, warm-up included": wrong_mean_with_warmup,
            "mean of the steady steps (not robust)": wrong_mean_of_steps,
            "two points, first log taken as N = 1": wrong_two_points,
            "a line in N instead of 1/N": wrong_linear_in_n,
        },
        world_size=1,
        timeout_s=30.0,
        hint="which steps describe the steady state, and which statistic ignores one bad step? "
        "Amdahl's T(N) is a straight line in which variable?",
        solution_helpers=(representative,),
    )
)
