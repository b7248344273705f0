"""Lab 12 is real practice: 0 answers visible before a submit, checked on the EXECUTED notebook.

The notebook runs top to bottom with papermill in FULL mode (a learner's Run All: nothing is
submitted, so no answer may appear anywhere, not in an output, a widget's saved state or a
markdown cell) and in QUICK mode (CI: a pretend learner submits some items; each answer may only
appear after its own `submitted [<id>]` marker). The search (lab_utils/practice/leaks.py) is first
shown to catch the ways an answer gets printed, on small synthetic notebooks.
"""

import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from lab_utils import practice
from lab_utils.practice import leaks
from lab_utils.tools.nbtools import execute

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "labs" / "12_interview.ipynb"
BANKS = [c.id for c in practice.load_bank("concept") + practice.load_bank("debug")] + [
    c.id for c in practice.all_critiques()
]


def notebook(*outputs, markdown=(), state=None):
    """A notebook whose code cells have these outputs (strings: stream; dicts: display data)."""
    cells = [new_markdown_cell(m) for m in markdown]
    for out in outputs:
        o = (
            new_output("stream", name="stdout", text=out)
            if isinstance(out, str)
            else new_output("display_data", data=out)
        )
        cells.append(new_code_cell("...", outputs=[o]))
    nb = new_notebook(cells=cells)
    if state:
        nb.metadata["widgets"] = {
            "application/vnd.jupyter.widget-state+json": {
                "state": {f"m{i}": {"state": s} for i, s in enumerate(state)},
                "version_major": 2,
            }
        }
    return nb


DECK = practice.make_drills(0)


# --- the search catches printed answers -----------------------------------------------------


def test_the_old_lab_printing_every_answer_is_caught():
    """What lab 12 did before: each question, the answer, the misconception's message."""
    text = "".join(
        f"[{i}] {d.question}\n    answer {d.answer:,.4g} {d.unit}: ACCEPTED\n"
        f"    -> {d.check(d.mistakes[0].value).message}\n"
        for i, d in enumerate(DECK)
    )
    found = leaks.find_leaks(notebook(text), [d.id for d in DECK])
    assert {f.item_id for f in found} == {d.id for d in DECK}


def test_a_bare_printed_answer_is_caught_when_precise_enough():
    precise = [d for d in DECK if leaks.searchable(d.answer)]
    assert len(precise) >= len(DECK) // 2
    for d in precise:
        for shown in (
            repr(d.answer),
            f"{d.answer:.4g}",
            f"{d.answer:,.6g}",
            f"{d.answer:.3g} {d.unit}",
        ):
            if leaks.sig_digits(shown.split()[0]) >= 3:
                found = leaks.find_leaks(notebook(f"the answer: {shown}\n"), [d.id])
                assert [f.item_id for f in found] == [d.id], (d.id, shown)


def test_explanations_html_widget_state_and_markdown_are_searched():
    d, c, k = DECK[3], practice.concept("fsdp-gather-twice"), practice.critique("amdahl-256")
    assert leaks.find_leaks(notebook({"text/html": f"<p>{d.explanation}</p>"}), [d.id])
    assert leaks.find_leaks(
        notebook(state=[{"value": f"<div>{k.statements[2].why}</div>"}]), [k.id]
    )
    assert leaks.find_leaks(notebook(markdown=[c.answer]), [c.id])
    assert leaks.find_leaks(notebook(repr(c.points[1].text)), [c.id])  # in a Python repr
    # private traits (a JavaScript bundle, plotly data) are not what a reader sees
    assert not leaks.find_leaks(notebook(state=[{"_esm": k.lesson}]), [k.id])


def test_an_answer_after_its_submit_is_fine_before_it_is_a_leak():
    d = DECK[5]
    after = str(d.check(d.answer))
    assert after.startswith(f"submitted [{d.id}]")
    assert leaks.find_leaks(notebook(d.prompt, after), []) == []
    assert leaks.find_leaks(notebook(d.prompt, d.explanation, after), [])  # shown first
    assert leaks.answers_after_submit(notebook(d.prompt, after)) >= 1
    other = DECK[6]  # another item's submit explains nothing
    assert leaks.find_leaks(notebook(str(other.check(1)), d.explanation), [d.id])


def test_the_prompts_themselves_are_not_answers():
    prompts = [d.prompt for d in DECK] + [practice.lookup(i).prompt for i in BANKS]
    ids = [d.id for d in DECK] + BANKS
    assert leaks.find_leaks(notebook("\n".join(prompts)), ids) == []


# --- the executed lab ---------------------------------------------------------------------


def lab_items(nb) -> list[str]:
    """Every item the lab can show: the banks, its drill decks and its mock interview."""
    seed = int(
        re.search(
            r"^SEED = (\d+)",
            "".join(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", [])),
            re.M,
        ).group(1)
    )
    decks = practice.DrillSession(seed).drills + practice.DrillSession(seed + 1).drills
    mock = [a.item.id for a in practice.MockInterview(seed=seed).items]
    return BANKS + [d.id for d in decks] + mock


@pytest.fixture(scope="module", params=["full", "quick"])
def executed(request, tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("LAB_PREDICTIONS", str(tmp_path_factory.mktemp("p") / "pred.json"))
    dest = tmp_path_factory.mktemp(request.param) / LAB.name
    execute(LAB, dest, quick=request.param == "quick")
    return request.param, nbformat.read(dest, as_version=4)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_no_answer_is_visible_before_its_submit(executed):
    mode, nb = executed
    items = lab_items(nb)
    found = leaks.find_leaks(nb, items)
    assert found == [], "\n".join(map(str, found[:20]))
    shown, submitted = leaks.shown_ids(nb), leaks.submitted_ids(nb)
    assert len([i for i in shown if i.startswith("drill:")]) >= len(practice.kinds())
    assert any(i.startswith("critique:") for i in shown) and any(
        i.startswith("concept:") for i in shown
    )
    if mode == "full":  # a learner's Run All submits nothing, so nothing may be revealed
        assert submitted == [] and leaks.answers_after_submit(nb) == 0
    else:  # the pretend learner answered drills, concepts, critiques and the mock
        kinds = {i.split(":", 1)[0] for i in submitted}
        assert kinds == {"drill", "concept", "debug", "critique"}
        assert len(submitted) >= 25 and leaks.answers_after_submit(nb) >= 25  # answers were shown
