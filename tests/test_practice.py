"""Interview practice (lab_utils/practice, lab 12): concept questions with rubrics, critiques of
flawed source answers (numbers from calc), the timed mock interview, and the widgets, driven by
setting values and clicking buttons. Before a submit, no widget's synced state holds any part of
the answer (checked with the same search the notebook test uses)."""

import itertools

import ipywidgets as w
import pytest

from lab_utils import practice
from lab_utils.practice import leaks
from lab_utils.practice.concepts import MIN_WORDS
from lab_utils.practice.items import math_pair
from lab_utils.practice.mock_ui import PRETEND_TEXT, MockWidget
from lab_utils.practice.widgets import ConceptCard, ConceptWidget, CritiqueWidget, DrillWidget

CONCEPTS, DEBUGS = practice.load_bank("concept"), practice.load_bank("debug")
CRITIQUES = practice.all_critiques()


def widget_text(widget) -> str:
    """Every public synced string of a widget tree: what a saved notebook's widget state holds."""
    seen, out, todo = set(), [], [widget]
    while todo:
        x = todo.pop()
        if id(x) in seen or not isinstance(x, w.Widget):
            continue
        seen.add(id(x))
        out += leaks._public_strings(x.get_state())
        todo += [c for c in getattr(x, "children", ())]
    return leaks.plain("\n".join(out))


def assert_no_secret(widget, items):
    text = widget_text(widget)
    for item in items:
        assert leaks.find_secrets(text, item) == [], f"{item.id} leaks before a submit"


# --- concept and debugging questions --------------------------------------------------------


def test_bank_covers_the_course_and_loads_cleanly():
    assert len(CONCEPTS) >= 25 and len(DEBUGS) >= 6
    topics = {c.topic for c in CONCEPTS}
    for needed in (
        "data-parallel",
        "collectives",
        "zero",
        "tensor-parallel",
        "pipeline",
        "3d",
        "memory",
        "precision",
        "moe",
        "long-context",
        "scaling",
        "production",
    ):
        assert needed in topics, needed
    assert any("fp8" in c.id for c in CONCEPTS)
    ids = [c.id for c in CONCEPTS + DEBUGS]
    assert len(ids) == len(set(ids))
    for c in CONCEPTS + DEBUGS:
        assert len(c.points) >= 3 and len(c.answer.split()) >= 40, c.id
        assert practice.lookup(c.id) is c


@pytest.mark.parametrize("c", CONCEPTS + DEBUGS, ids=lambda c: c.id)
def test_keyword_hints_find_most_points_in_the_model_answer(c):
    """The hint is honest when it spots most key points in a good answer (the model answer plus
    the key points in other words would be a cheat), and few in an unrelated answer."""
    r = c.submit(c.answer)
    assert r.valid and sum(r.hints) >= len(c.points) / 2, [
        p.text for p, h in zip(c.points, r.hints) if not h
    ]
    off_topic = c.submit("I would ask my manager for a bigger budget and more time to think.")
    assert sum(off_topic.hints) <= 1


def test_the_fail_fast_hint_is_not_credited_to_the_opposite_advice():
    hang = practice.concept("debug:hang-at-step-n")  # point 4: make it fail, not hang
    assert not hang.submit("Raise the NCCL timeout to two hours and restart the job.").hints[3]
    assert hang.submit("Set a short timeout and a monitored_barrier so the job fails.").hints[3]


def test_concept_submit_grade_and_bad_input():
    c = practice.concept("zero-stages")
    assert not c.submit("too short").valid and f"at least {MIN_WORDS} words" in c.submit("").message
    assert not c.submit(None).valid
    r = c.submit("ZeRO-1 shards optimizer state, 4N + 12N/K, and sends the same bytes as DDP.")
    assert str(r).startswith("submitted [concept:zero-stages]") and c.answer in str(r)
    assert r.score is None and r.grade({1, 4}) == 0.5 and r.score == 0.5
    for bad in ({0}, {5}, {"1"}, {True}, 3):
        with pytest.raises(ValueError):
            r.grade(bad)
    with pytest.raises(ValueError, match="no question"):
        practice.concept("nope")


# --- critiques ------------------------------------------------------------------------------

CLAIMS = {  # item -> the right numbers (the calculators' answers, checked here by hand)
    "gpt3-1000-a100": (21.875, 104),
    "70b-256-state": (35.0, 12.03),
    "70b-64-zero": (1120, 17.5),
    "10b-ddp-memory": (160, 80, 40),
    "60gb-ddp-vs-fsdp": (723.4, 0.9563),
    "amdahl-256": (41.96, 16.39),
    "ring-latency": (10.23,),
    "zero2-halves-comm": (1.0,),
    "zero-formulas": (38.5, 26.25),
    "1f1b-bubble": (1.0, 27.27),
    "interleaved-gpipe": (1.4375, 17.95, 1.0),
    "sp-reduces-comm": (1.0, 0.3269),
    "tp-two-allreduces": (4, 469.8),
    "activations-20-bytes": (2.282, 13.02),
    "grad-accum-32x": (5.882, 1.0, 8.444),
    "ddp-hang-fixes": (),
    "gpt3-4096": (8.477,),
    "bf16-small-grads": (0.3973, 0.003906),
    "loss-goes-down": (2.442e-4,),
}


def test_every_source_claim_has_an_item_with_the_right_numbers():
    assert {c.id.split(":", 1)[1] for c in CRITIQUES} == set(CLAIMS)
    for c in CRITIQUES:
        want = CLAIMS[c.id.split(":", 1)[1]]
        assert [d.answer for d in c.fixes] == pytest.approx(list(want), rel=2e-3), c.id
        assert c.source.startswith("sources/") and 1 <= c.n_wrong < len(c.statements)
        for d in c.fixes:
            assert d.mistakes, f"{d.id}: the flawed figure should be named"


@pytest.mark.parametrize("c", CRITIQUES, ids=lambda c: c.id)
def test_critique_grading(c):
    wrong = {i for i, s in enumerate(c.statements, 1) if s.wrong}
    right = set(range(1, len(c.statements) + 1)) - wrong
    perfect = c.grade(wrong, [d.answer for d in c.fixes])
    assert perfect.valid and perfect.score == 1 and str(perfect).startswith(f"submitted [{c.id}]")
    assert not c.grade().valid and "nothing to submit" in str(c.grade())  # empty: refused
    assert c.grade({next(iter(right))}).score == 0  # a false alarm only
    assert c.grade(wrong | right, [d.answer for d in c.fixes]).score < 1  # false alarms cost
    flawed = c.grade(wrong, [d.mistakes[0].value for d in c.fixes])  # the claim's own figures
    assert all("classic mistake" in chk.message for chk in flawed.checks)
    assert flawed.score == pytest.approx(c.n_wrong / (c.n_wrong + len(c.fixes)))


def test_critique_bad_input_submits_nothing():
    c = practice.critique("amdahl-256")
    for wrong, numbers, message in (
        ({0}, [], "no statement 0"),
        ({9}, [], "numbered 1 to 4"),
        ({1}, ["fifty"], "number a)"),
        (3, [], "statement numbers"),
        ({1}, [1, 2, 3], "position 2"),
    ):
        r = c.grade(wrong, numbers)
        assert not r.valid and message in r.message and "submitted" not in str(r)
    assert c.grade({3, 4}, {1: "16.4%"}).checks[1].accepted  # a dict, a unit, a skipped a)
    with pytest.raises(ValueError, match="no critique"):
        practice.critique("nope")


# --- the mock interview ---------------------------------------------------------------------


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_mock_draws_a_seeded_mix_and_scores_it_against_the_clock():
    clock = FakeClock()
    m = practice.MockInterview(seed=5, minutes=10, clock=clock)
    again = practice.MockInterview(seed=5, minutes=10)
    assert [a.item.id for a in m.items] == [a.item.id for a in again.items]
    kinds = [type(a.item).__name__ for a in m.items]
    assert kinds.count("Drill") == 3 and kinds.count("Critique") == 2 and len(m.items) == 8
    with pytest.raises(ValueError, match="start"):
        m.answer(value=1)
    m.start()
    for i, slot in enumerate(m.items):
        item = slot.item
        clock.t += 60 if i < 5 else 400  # the last answers come after 10 minutes
        if isinstance(item, practice.Drill):
            assert not m.answer(value="abc").valid and slot.result is None
            m.answer(value=item.answer)
        elif isinstance(item, practice.Concept):
            m.answer(text=item.answer)
            m.grade(set(range(1, len(item.points) + 1)))
        else:
            m.answer(
                wrong={j for j, s in enumerate(item.statements, 1) if s.wrong},
                numbers=[d.answer for d in item.fixes],
            )
        m.next()
    assert m.finished
    card = m.scorecard()
    assert [r["points"] for r in card[:5]] == [1.0] * 5
    assert all(r["points"] == 0 and r["note"] == "after the time limit" for r in card[5:])
    assert m.score == pytest.approx(5 / 8) and m.show_scorecard() is None
    with pytest.raises(ValueError):
        practice.MockInterview(minutes=0)
    with pytest.raises(ValueError):
        practice.MockInterview(n_drills=-1)


# --- the widgets, driven without a browser -------------------------------------------------


def test_drill_widget_rejects_bad_input_and_reveals_only_after_submit():
    ui = DrillWidget(practice.DrillSession(seed=2))
    assert_no_secret(ui, ui.session.drills)
    d = ui.session.current
    ui.card.box.value = "forty"
    ui.card.submit_button.click()
    assert "not a number" in ui.card.error.value and ui.session.answered == 0
    assert_no_secret(ui, ui.session.drills)
    ui.card.box.value = str(d.mistakes[0].value)
    ui.card.submit_button.click()
    assert "classic mistake" in ui.card.feedback.value and ui.card.submit_button.disabled
    assert ui.card.error.value == "" and ui.session.answered == 1
    ui.next_button.click()
    ui.card.give_up_button.click()
    assert "Not answered" in ui.card.feedback.value and ui.session.answered == 2
    assert_no_secret(ui, ui.session.drills[2:])  # the others stay hidden


def test_concept_widget_write_submit_tick_score():
    ui = ConceptWidget("concept")
    assert_no_secret(ui, CONCEPTS)
    assert len(ui.picker.options) == len(CONCEPTS)
    for (label, _), c in zip(ui.picker.options, CONCEPTS):  # cut at a word, the cut marked
        full = f"{c.topic}: {c.question}"
        assert label == full or (
            len(label) <= 90
            and label.endswith("…")
            and full[len(label) - 1] in " ,;:"
            and full.startswith(label[:-1])
        )
    ui.picker.value = "concept:pipeline-bubble"
    c = ui.card.concept
    ui.card.text.value = "idle"
    ui.card.submit_button.click()
    assert "at least" in ui.card.error.value and not ui.card.points
    assert_no_secret(ui, CONCEPTS)
    ui.card.text.value = (
        "Stages idle while the pipeline fills and drains, (p-1)/(m+p-1); more micro-batches."
    )
    ui.card.submit_button.click()
    assert c.answer in leaks.plain(ui.card.feedback.value) and len(ui.card.points) == len(c.points)
    assert [cb.value for cb in ui.card.points] == list(ui.results[c.id].hints)  # pre-ticked hints
    for cb in ui.card.points:
        cb.value = True
    ui.card.score_button.click()
    assert "100%" in ui.card.score.value and ui.results[c.id].score == 1
    ui.picker.value = "concept:zero-stages"  # another question: a fresh card, still hidden
    assert ui.card.feedback.value == "" and ui.card.points == []
    ui.picker.value = "concept:pipeline-bubble"  # back: the submitted result is kept
    assert ui.card.submit_button.disabled and ui.card.points


def test_debug_widget_uses_the_walk_through_bank():
    ui = ConceptWidget("debug")
    assert {v for _, v in ui.picker.options} == {c.id for c in DEBUGS}
    assert_no_secret(ui, DEBUGS)
    with pytest.raises(ValueError, match="topic"):
        ConceptWidget("concept", topic="nope")


def test_critique_widget_flags_numbers_and_errors():
    ui = CritiqueWidget()
    assert_no_secret(ui, CRITIQUES)
    ui.picker.value = "critique:amdahl-256"
    card = ui.card
    card.numbers[0].value = "lots"
    card.submit_button.click()
    assert "number a)" in card.error.value and card.feedback.value == ""
    assert_no_secret(ui, CRITIQUES)
    card.flags[2].value = card.flags[3].value = True
    card.numbers[0].value, card.numbers[1].value = "42", "16.4"
    card.submit_button.click()
    assert "score 100%" in card.feedback.value and all(f.disabled for f in card.flags)


def test_an_empty_critique_submit_reveals_nothing_and_locks_nothing():
    ui = CritiqueWidget()
    ui.picker.value = "critique:amdahl-256"
    card = ui.card
    card.submit_button.click()  # nothing ticked, both boxes empty
    assert "nothing to submit" in card.error.value and card.feedback.value == ""
    assert not card.submit_button.disabled and "critique:amdahl-256" not in ui.results
    assert_no_secret(ui, CRITIQUES)
    card.flags[2].value = True
    card.submit_button.click()
    assert card.submit_button.disabled and "submitted" in card.feedback.value


def test_mock_concept_not_self_graded_keeps_its_hint_score_and_the_clock_stops_at_finish():
    clock = FakeClock()
    ui = MockWidget(practice.MockInterview(seed=1, minutes=20, clock=clock))
    ui.start_button.click()
    while not isinstance(ui.card, ConceptCard):
        ui.next_button.click()
    slot = ui.mock.items[ui.mock.index]
    ui.card.text.value = PRETEND_TEXT
    ui.card.submit_button.click()
    ui.card.points[0].value = True  # ticked, but "Score" never pressed
    ticked = {i for i, cb in enumerate(ui.card.points, 1) if cb.value}
    ui.next_button.click()
    assert slot.result.score == len(ticked) / len(slot.item.points) > 0
    clock.t += 120
    ui.finish_button.click()
    assert "Finished" in ui.status.value and "left" not in ui.status.value
    clock.t += 600  # the clock no longer runs
    assert ui.mock.elapsed_s == 120 and ui.holder.children == ()
    with pytest.raises(ValueError, match="finished"):
        ui.mock.answer(value=1)
    m = practice.MockInterview(seed=1, minutes=20, clock=clock)  # the same without a widget
    m.start()
    while not isinstance(m.current, practice.Concept):
        m.next()
    r = m.answer(text=m.current.answer)
    m.finish()
    assert r.score == sum(r.hints) / len(r.hints)


def test_mock_widget_runs_a_whole_interview():
    clock = FakeClock()
    ui = MockWidget(practice.MockInterview(seed=1, minutes=20, clock=clock))
    items = [a.item for a in ui.mock.items]
    assert_no_secret(ui, items)
    ui.finish_button.click()  # disabled until start: no effect
    assert ui.result.value == ""
    ui.start_button.click()
    assert "Question 1 of 8" in ui.status.value and "20:00 left" in ui.status.value
    assert_no_secret(ui, items)
    clock.t += 90
    score = ui.simulate()
    assert 0 < score <= 1 and "Score" in ui.result.value and ui.mock.finished


def rendered_texts():
    """Every text the practice items can render: prompts, results (right, wrong, given up),
    statements, key points, model answers; drills of every kind over several seeds."""
    drills = [d for seed in range(6) for d in practice.make_drills(seed)]
    for d in drills:
        yield d.id, d.prompt
        for value in (d.answer, d.answer * 3, *(m.value for m in d.mistakes)):
            yield d.id, str(d.check(value))
    session = practice.DrillSession(seed=0)
    yield "give up", str(session.give_up(0))
    for c in CONCEPTS + DEBUGS:
        yield c.id, c.prompt + "\n" + str(c.submit(c.answer))
    for c in CRITIQUES:
        yield c.id, c.prompt + "\n" + str(c.grade({1}, [d.answer for d in c.fixes]))


def test_no_rendered_practice_text_holds_a_pair_of_dollar_signs():
    """JupyterLab typesets the text between two "$" of an HTML output as LaTeX (lab 12's cost
    drill lost its price that way): money is written in USD, and no text may hold such a pair."""
    found = [(i, math_pair(t)) for i, t in rendered_texts() if math_pair(t)]
    assert found == []
    assert math_pair("at $3 per GPU-hour (answer in $M)") and not math_pair(r"\$3 or \$4")
    cost = practice.make_drill("training_cost", "0.1")
    assert cost.check(f"${cost.answer:.4f}M").accepted and "USD" in cost.prompt


def test_module_entry_points():
    assert isinstance(practice.drill_widget(0), DrillWidget)
    assert isinstance(practice.critique_widget(), CritiqueWidget)
    assert isinstance(practice.mock_widget(0, minutes=5), MockWidget)
    for item_id in itertools.islice((i.id for i in CRITIQUES + CONCEPTS), 5):
        assert practice.lookup(item_id).id == item_id
    with pytest.raises(ValueError, match="not a practice item"):
        practice.lookup("quiz:1")


# --- the layout: packages with an index, imports one way ------------------------------------


def import_graph(package: str) -> tuple[dict[str, set[str]], list[str]]:
    """Module -> the modules of ``package`` it imports (at module level or in a function), and
    the private names (``_x``) one module of the package imports from another."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = {
        ".".join(f.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): f
        for f in (root / package.replace(".", "/")).rglob("*.py")
    }
    graph, private = {}, []
    for name, path in files.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
                private += [
                    f"{name}: {node.module}.{a.name}"
                    for a in node.names
                    if node.module in files and a.name.startswith("_")
                ]
        graph[name] = {m for m in found if m in files and m != name}
    return graph, private


@pytest.mark.parametrize("package", ["lab_utils.practice", "lab_utils.cards"])
def test_no_import_cycle_and_no_private_import(package):
    graph, private = import_graph(package)
    assert private == []
    done, path = set(), []

    def visit(m):  # depth-first search: a module met again on the path
        assert m not in path, f"import cycle: {' -> '.join(path[path.index(m) :] + [m])}"
        if m not in done:
            path.append(m)
            for n in graph[m]:
                visit(n)
            path.pop()
            done.add(m)

    for m in graph:
        visit(m)
