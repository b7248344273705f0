"""The runtime's two floors (lab_utils/runtime/__init__.py): no import cycle inside runtime/, and
nothing outside runtime/ imports its engine. The import graph is tests/test_imports.py's (one
reader for the suite: imports at any depth count, `if TYPE_CHECKING:` ones do not)."""

from test_imports import Arrow, arrows, cycles


def test_no_import_cycle_inside_the_runtime():
    inside = [
        sorted(group)
        for group, _ in cycles()
        if any(m.startswith("lab_utils.runtime") for m in group)
    ]
    assert inside == []


def test_the_cycle_finder_finds_a_runtime_cycle():  # negative control
    a, b = "lab_utils.runtime.a", "lab_utils.runtime.b"
    found = cycles([Arrow(a, b, "a.py", 1, True), Arrow(b, a, "b.py", 1, False)])
    assert [sorted(group) for group, _ in found] == [[a, b]]


def test_nothing_outside_the_runtime_imports_its_engine():
    leaks = [
        str(a)
        for a in arrows()
        if a.target.startswith("lab_utils.runtime.engine")
        and not a.source.startswith("lab_utils.runtime")
    ]
    assert leaks == []


def test_the_runtime_stays_within_its_written_budget():
    """runtime/__init__.py's budget, in logical lines (lab_utils.tools.size: the formatter's line
    breaks do not count): the public floor at most 400, the engine at most 1,650."""
    from pathlib import Path

    from lab_utils.tools.size import logical_lines

    root = Path(__file__).resolve().parents[1] / "lab_utils" / "runtime"
    public = sum(logical_lines(p) for p in root.glob("*.py"))
    engine = sum(logical_lines(p) for p in (root / "engine").glob("*.py"))
    assert public <= 400, f"the runtime's public floor says {public} logical lines (budget 400)"
    assert engine <= 1650, f"the runtime's engine says {engine} logical lines (budget 1,650)"
