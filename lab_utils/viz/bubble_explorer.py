"""Bubble explorer: the ideal timeline of a pipeline schedule and its bubble (lab 07).

A thin view over ``calc.schedule`` (simulated ideal timeline, drawn with ``gantt_spec``),
``calc.bubble`` (closed forms) and ``calc.bubble_from_timeline`` (idle fraction read off the
simulated timeline): the closed form and the simulation are shown side by side.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lab_utils.calc import Bubble, Schedule, bubble, bubble_from_timeline, schedule
from lab_utils.calc._check import number, pos_int
from lab_utils.viz._base import Explorer, Spec
from lab_utils.viz.controls import dropdown, float_text, int_text
from lab_utils.viz.gantt import gantt_spec
from lab_utils.viz.style import FIGURE_WIDTH

SCHEDULE_OPTIONS = [
    ("GPipe", "gpipe"),
    ("1F1B", "1f1b"),
    ("interleaved 1F1B", "interleaved"),
    ("ZB-H1 (zero bubble)", "zb-h1"),
]
# Drawing thousands of bars makes the page sluggish and the labels unreadable.
MAX_OPS = 3000


@dataclass(frozen=True)
class BubbleState:
    """Validated inputs; ``v`` is 1 unless the schedule is interleaved. Times in t_f units."""

    schedule: str
    p: int
    m: int
    v: int
    t_b: float


@dataclass(frozen=True)
class BubbleResult:
    """Everything the figure and the text show (pure: no widgets)."""

    state: BubbleState
    timeline: Schedule
    closed_form: Bubble
    simulated_of_total: float


def validate(values: dict[str, Any]) -> BubbleState:
    name = values["schedule"]
    if name not in dict((v, k) for k, v in SCHEDULE_OPTIONS):
        raise ValueError(f"schedule must be one of gpipe, 1f1b, interleaved, zb-h1; got {name!r}")
    p = pos_int("p (pipeline stages)", values["p"])
    m = pos_int("m (micro-batches)", values["m"])
    v = pos_int("v (model chunks per rank)", values["v"]) if name == "interleaved" else 1
    ratio = number(
        "t_b/t_f",
        values["t_b_over_t_f"],
        0,
        100,
        lo_open=True,
        expected="a positive number up to 100",
        hint="the backward usually takes about 2x the forward",
    )
    per_mb = 3 if name == "zb-h1" else 2  # F, B (and W) per micro-batch per chunk
    if p * m * v * per_mb > MAX_OPS:
        raise ValueError(
            f"{p * m * v * per_mb} operations are too many to draw; keep p*m*v "
            f"<= {MAX_OPS // per_mb} (e.g. fewer micro-batches)"
        )
    state = BubbleState(name, p, m, v, float(ratio))
    bubble(name, p, m, v, 1.0, state.t_b)  # the calculator's own checks (e.g. m % p)
    return state


@lru_cache(maxsize=64)  # figure and summary share one simulation per state
def compute(st: BubbleState) -> BubbleResult:
    """Simulate the schedule and compute both bubbles (closed form and from the timeline)."""
    tl = schedule(st.schedule, st.p, st.m, st.v, 1.0, st.t_b)
    closed = bubble(st.schedule, st.p, st.m, st.v, 1.0, st.t_b)
    sim = bubble_from_timeline(tl.events).mean
    return BubbleResult(st, tl, closed, sim)


def figure_spec(st: BubbleState) -> Spec:
    """The Gantt chart of the ideal timeline, both bubble fractions in the title."""
    r = compute(st)
    title = (
        f"{st.schedule}: p={st.p}, m={st.m}"
        + (f", v={st.v}" if st.v > 1 else "")
        + f", t_b={st.t_b:g} t_f  |  bubble = {r.closed_form.of_ideal:.1%} of ideal "
        f"compute, {r.closed_form.of_total:.1%} of total time"
    )
    return gantt_spec(
        r.timeline.events,
        title=title,
        width=FIGURE_WIDTH,
        height=min(560, max(300, 120 + 42 * st.p)),
    )


def summary_html(st: BubbleState) -> str:
    r = compute(st)
    b, tl = r.closed_form, r.timeline
    if st.schedule in ("gpipe", "1f1b"):
        formula = (
            f"(p-1)/m = {st.p - 1}/{st.m} of ideal, (p-1)/(m+p-1) = "
            f"{st.p - 1}/{st.m + st.p - 1} of total"
        )
    elif st.schedule == "interleaved":
        formula = f"(p-1)/(v m) = {st.p - 1}/({st.v}x{st.m}) of ideal"
    else:
        formula = "(p-1)(t_f + T_B - T_W) idle per rank, T_W = t_b/2 (Qi et al. 2023)"
    return (
        f"Closed form ({formula}): <b>{b.of_ideal:.1%}</b> of ideal compute time, "
        f"<b>{b.of_total:.1%}</b> of total time. Simulated timeline: ranks idle "
        f"{r.simulated_of_total:.1%} of the step on average (makespan {tl.makespan:g} t_f). "
        f"Peak micro-batches in flight per rank (activation memory): "
        f"{list(tl.peak_in_flight)}."
    )


class BubbleExplorer(Explorer):
    """Ideal pipeline timeline + bubble. ``set(schedule="interleaved", p=4, m=8, v=2)``."""

    TITLE = "Bubble explorer"
    CSS = "bubble-explorer"
    COLUMNS = 3  # five controls in 3 columns: wide enough inputs at 1280 x 800
    validate = staticmethod(validate)
    figure_spec = staticmethod(figure_spec)
    summary_html = staticmethod(summary_html)

    def __init__(self, **initial: Any) -> None:
        controls = {
            "schedule": dropdown("schedule", SCHEDULE_OPTIONS, "1f1b"),
            "p": int_text("p (stages)", 4),
            "m": int_text("m (micro-batches)", 8),
            "v": int_text("v (chunks, interleaved)", 2),
            "t_b_over_t_f": float_text("t_b / t_f", 2.0),
        }
        super().__init__(controls, **initial)
        self._sync_v()

    def on_control_change(self, change: dict[str, Any]) -> None:
        if change["owner"] is self.controls["schedule"]:
            self._sync_v()

    def _sync_v(self) -> None:
        # v only means something for the interleaved schedule; grey it out otherwise.
        self.controls["v"].disabled = self.controls["schedule"].value != "interleaved"


def bubble_explorer(**initial: Any) -> BubbleExplorer:
    """A ready-to-display bubble explorer (lab 07)."""
    return BubbleExplorer(**initial)
