"""Exercise "diagnose_trace" (lab 13): name the ONE problem injected into a profiled run, and
the evidence in its trace that shows it.

The learner writes

    fn(ev: Evidence) -> (cause, evidence_field)

where ``ev`` condenses one 4-rank run's trace files (``lab_utils.profiling.evidence``), cause is
one of CAUSES and evidence_field one of ``profiling.FIELDS``. The check profiles one run per
injected problem (``experiments.lab13.injected``: a straggler rank, a data-loader stall, one
bucket too large to overlap, a host sync per gradient, a recompilation every step) and asks
``fn`` about each; the grader knows what was injected. A wrong cause is answered by what the
trace shows against that reading (the misconception, named); a right cause with evidence that
does not show it is rejected too. ``grade(case, cause, field)`` grades one typed answer (the
notebook draws one case at random).
"""

from __future__ import annotations

from lab_utils.exercises._core import Exercise, Verdict, register
from lab_utils.experiments.lab13.injected import PROBLEMS, SLOW_RANK, Case, diagnosis_cases
from lab_utils.models import GPTConfig
from lab_utils.profiling import FIELDS, Evidence

CAUSES = PROBLEMS + ("healthy", "slow_network")
CFG, BATCH, STEPS = GPTConfig(), 2, 1  # the run every problem is injected into
CASES = PROBLEMS  # the configurations the grader runs: one run per injected problem
SHOWS = {  # problem -> the evidence fields that show it
    "straggler": ("slowest_rank", "compute_spread", "gap_cause"),
    "data_stall": ("loader_ms_per_step", "gap_cause"),
    "big_bucket": ("all_reduces_per_step", "overlap_fraction", "exposed_ms"),
    "host_sync": ("item_calls_per_step",),
    "recompile": ("compiles_per_step",),
}


def diagnose(ev: Evidence) -> tuple[str, str]:
    """Count-based signals first (they do not depend on this machine's load), timing last."""
    if ev.compiles_per_step >= 1:
        return "recompile", "compiles_per_step"
    if ev.loader_ms_per_step > 5:
        return "data_stall", "loader_ms_per_step"
    if ev.item_calls_per_step > 4:
        return "host_sync", "item_calls_per_step"
    if ev.all_reduces_per_step <= 1:
        return "big_bucket", "all_reduces_per_step"
    if ev.compute_spread > 2:
        return "straggler", "slowest_rank"
    return "healthy", "gap_cause"


# ----------------------------------------------------------------------------- wrong versions
def wrong_idle_means_straggler(ev: Evidence) -> tuple[str, str]:
    """Any long idle gap is blamed on a slow rank."""
    return "straggler", "gap_cause"


def wrong_exposed_means_network(ev: Evidence) -> tuple[str, str]:
    """Exposed communication is blamed on the network, whatever else the trace shows."""
    if ev.all_reduces_per_step <= 1:
        return "slow_network", "exposed_ms"
    return diagnose(ev)


def wrong_item_is_free(ev: Evidence) -> tuple[str, str]:
    """Host syncs are ignored: the run is called healthy when no timing stands out."""
    cause, field = diagnose(ev)
    return ("healthy", "gap_ms") if cause == "host_sync" else (cause, field)


def wrong_compile_is_the_loader(ev: Evidence) -> tuple[str, str]:
    """A long gap before the step's collectives is read as waiting for data."""
    cause, field = diagnose(ev)
    return ("data_stall", "gap_ms") if cause == "recompile" else (cause, field)


def wrong_evidence_field(ev: Evidence) -> tuple[str, str]:
    """The right cause, always 'shown' by the longest gap."""
    return diagnose(ev)[0], "gap_ms"


# ----------------------------------------------------------------------------- the grader
def _misreading(truth: str, cause: str, ev: Evidence) -> str:
    """What the trace says against answering ``cause`` when ``truth`` was injected."""
    what = {
        "straggler": f"rank {ev.slowest_rank} computes {ev.compute_spread:.1f}x as long as "
        f"the fastest rank and the others wait for it ({ev.gap_cause}): ONE rank "
        "is slow, the collectives only make everyone wait for it",
        "data_stall": f"every rank spends {ev.loader_ms_per_step:.0f} ms per step inside "
        "enumerate(DataLoader) with no operator running: the GPUs (here, cores) "
        "wait for input on all ranks alike, which no faster network or rank fixes",
        "big_bucket": f"{ev.all_reduces_per_step:.0f} all-reduce per step, after backward "
        f"(overlap {ev.overlap_fraction:.0%}): the bucket holds every gradient, so "
        "the transfer cannot start while backward still computes. The network is "
        "not slow; the communication is EXPOSED",
        "host_sync": f"{ev.item_calls_per_step:.0f} aten::item calls per step (a healthy step "
        "has 1, the logged loss): each .item() is a host sync; on a GPU the CPU "
        "stops there until the device queue drains, on this CPU it costs little, "
        "so the count is the evidence, not the time",
        "recompile": f"{ev.compiles_per_step:.0f} Dynamo compilations per step "
        "(entire_frame_compile events): the compiled function sees a new shape "
        "every step. The long gap on the other ranks is them waiting for the "
        "compiling rank, not for data",
    }[truth]
    if cause not in CAUSES:
        return f"'{cause}' is not a cause this exercise knows; name one of {list(CAUSES)}"
    return f"you said {cause}, but {what}"


def grade(case: Case, cause: str, field: str) -> Verdict:
    """One answer about one case (the notebook's typed answer, and the check's loop)."""
    if not isinstance(cause, str) or not isinstance(field, str):
        return Verdict.fail(
            f"answer (cause, evidence_field) as two strings, got {(cause, field)!r}"
        )
    truth = case.problem
    if cause != truth:
        return Verdict.fail(_misreading(truth, cause, case.evidence))
    if field not in FIELDS:
        return Verdict.fail(
            f"right cause; but '{field}' is not an evidence field: pick one of {list(FIELDS)}"
        )
    if field not in SHOWS[truth]:
        return Verdict.fail(
            f"right cause ({truth}), but {field} does not show it: "
            f"{field} = {getattr(case.evidence, field)!r}. The evidence is "
            f"{' or '.join(SHOWS[truth])}"
        )
    return Verdict.ok(f"{truth}, shown by {field} = {getattr(case.evidence, field)!r}")


def check(ctx, fn) -> Verdict:
    cases = diagnosis_cases(ctx, CFG, BATCH, STEPS)  # cached on warm ranks (see injected.py)
    for problem in PROBLEMS:
        ev = cases[problem].evidence
        answer = fn(ev)
        if not (isinstance(answer, tuple) and len(answer) == 2):
            return Verdict.fail(f"return (cause, evidence_field), got {answer!r}")
        verdict = grade(cases[problem], *answer)
        if not verdict.passed:
            return Verdict.fail(
                f"the run with one injected problem #{PROBLEMS.index(problem)}: {verdict.message}"
            )
    return Verdict.ok(
        f"all {len(PROBLEMS)} injected problems named with their evidence "
        f"({', '.join(PROBLEMS)}; the straggler was rank {SLOW_RANK})"
    )


register(
    Exercise(
        name="diagnose_trace",
        lab="13_performance",
        summary="name the one problem injected into a profiled 4-rank run, and its evidence",
        signature="fn(ev: Evidence) -> (cause, evidence_field)",
        check=check,
        reference=diagnose,
        wrong={
            "every idle gap is a straggler": wrong_idle_means_straggler,
            "exposed communication blamed on the network": wrong_exposed_means_network,
            "host syncs ignored": wrong_item_is_free,
            "recompilation read as a data stall": wrong_compile_is_the_loader,
            "the right cause with the longest gap as evidence": wrong_evidence_field,
        },
        world_size=4,
        timeout_s=120.0,
        hint="counts first (compilations, aten::item calls, all-reduces per step, time inside the "
        "DataLoader): they do not depend on the machine's load; then who is slow",
    )
)
