"""Flashcards: the deck (coverage, calc-backed numbers, validation), Leitner boxes, the progress
file, the review widget (driven by .click()) and the terminal quiz (piped stdin)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab_utils import calc
from lab_utils.cards import (
    LAB_TITLES,
    MISCONCEPTIONS,
    CardState,
    DeckError,
    Progress,
    ProgressStore,
    ReviewSession,
    answer,
    check_deck,
    cli_main,
    interval,
    is_due,
    load_deck,
    load_progress,
    progress_path,
    resolver,
    review_widget,
    save_progress,
)
from lab_utils.cards.widget import text_html

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def progress_file(tmp_path, monkeypatch):
    """Every test gets its own progress file; nothing touches ~/.distributed_labs."""
    path = tmp_path / "progress" / "cards.json"
    monkeypatch.setenv("LAB_CARDS_PROGRESS", str(path))
    return path


def card(card_id):
    (found,) = [c for c in load_deck() if c.id == card_id]
    return found


# --- the deck -----------------------------------------------------------------------------


def test_deck_is_big_covers_every_lab_and_passes_its_self_test():
    cards = load_deck()
    assert len(cards) >= 120
    notebooks = {
        p.name[:2]
        for p in (Path(__file__).resolve().parents[1] / "labs").glob("[0-9][0-9]_*.ipynb")
    }
    assert set(LAB_TITLES) == notebooks, "every lab notebook has a deck title, and only those"
    for lab in LAB_TITLES:
        assert len(load_deck(labs=lab)) >= 5, f"lab {lab} has fewer than 5 cards"
    assert len({c.id for c in cards}) == len(cards), "card ids must be unique"
    assert check_deck() == []
    for c in cards:  # every placeholder was filled: no raw {name} left on screen
        assert not resolver.placeholders(c.front + c.back), c.id
        assert c.front.strip() and c.back.strip() and c.topics


def test_every_syllabus_misconception_has_a_card_that_states_the_correct_version():
    assert set(MISCONCEPTIONS) == {
        "myth-ring-latency",
        "myth-zero-comm",
        "myth-zero1-memory",
        "myth-1f1b-bubble",
        "myth-bubble-ratio",
        "myth-pp-activations",
        "myth-tp-sp",
        "myth-dataparallel",
        "myth-mixed-precision",
    }
    for tag in MISCONCEPTIONS:
        assert load_deck(topics=tag), f"no card for {tag}"
    ring = card("coll-myth-ring-latency")
    assert "LINEAR" in ring.back and ring.values["ring"] > 50 * ring.values["tree"]
    assert card("zero-myth-communication").values["ratio"] == pytest.approx(1.0)
    assert "4N + 12N/K" in card("zero-1-memory").back
    assert "2N + 14N/K" in card("zero-2-memory").back
    ofob = card("pp-myth-1f1b-bubble").values
    assert ofob["gpipe"] == ofob["ofob"] and ofob["hold_1f1b"] == 8 and ofob["hold_gpipe"] == 32
    ratio = card("pp-myth-bubble-ratio").values
    assert ratio["ideal"] == pytest.approx(3 / 4) and ratio["total"] == pytest.approx(3 / 7)
    pp = card("pp-myth-first-stage-activations").values
    assert pp["pp8"] == pytest.approx(pp["pp1"]) and pp["last"] < pp["pp8"] / 4
    tp = card("tp-myth-sequence-parallel").values
    assert tp["none"] > tp["tp"] > tp["sp"]
    assert "data parallelism" in card("dp-myth-dataparallel").back
    mp = card("memory-myth-mixed-precision-state").values
    assert mp["fp32"] == mp["mixed"] == 16


def test_calc_backed_answers_equal_calc_and_the_published_figures():
    c7 = card("memory-7b-does-not-fit")
    assert c7.values["state"] == calc.model_state_memory(7e9, "mixed_adam").total
    assert "112 GB" in c7.back
    assert "= 48 GB" in card("interview-drill-3b").back
    assert "120 GB / 31.4 GB / 16.6 GB / 1.9 GB" in card("zero-table").back
    zero = card("zero-table").values
    for name, stage in (("ddp", 0), ("z1", 1), ("z2", 2), ("z3", 3)):
        assert zero[name] == calc.model_state_memory(7.5e9, zero_stage=stage, dp=64).total
    amdahl = card("scaling-amdahl-limit")
    assert amdahl.values["value"] == calc.amdahl_limit(0.05) and "at most 20x" in amdahl.back
    assert "1.5x" in card("zero-3-communication").back
    assert "about 34 days" in card("mesh-gpt3-time").back  # Narayanan et al. 2021, sec. 5.1


def test_numbers_follow_calc_when_calc_changes(tmp_path, monkeypatch):
    deck = _deck(
        tmp_path,
        [
            _card_yaml(
                "a-card",
                back="limit {value}",
                calc="{fn: amdahl_limit, args: {serial_fraction: 0.05}, unit: x, digits: 0}",
            )
        ],
    )
    assert load_deck(deck_dir=deck)[0].back == "limit 20x"
    monkeypatch.setitem(resolver.CALC_FUNCTIONS, "amdahl_limit", lambda serial_fraction: 99.0)
    fresh = _deck(
        tmp_path / "again",
        [
            _card_yaml(
                "a-card",
                back="limit {value}",
                calc="{fn: amdahl_limit, args: {serial_fraction: 0.05}, unit: x, digits: 0}",
            )
        ],
    )
    assert load_deck(deck_dir=fresh)[0].back == "limit 99x"


def test_filters_by_lab_and_topic():
    assert {c.lab for c in load_deck(labs="04")} == {"04"}
    assert {c.lab for c in load_deck(labs=[4, "5"])} == {"04", "05"}
    assert all("zero" in c.topics for c in load_deck(topics="zero"))
    with pytest.raises(ValueError, match="lab must be one of"):
        load_deck(labs="99")
    with pytest.raises(ValueError, match="no card has topic"):
        load_deck(topics="zeor")


def _card_yaml(cid, lab='"05"', front="Q?", back="A.", calc=None, extra=""):
    text = (
        f"  - id: {cid}\n    lab: {lab}\n    topics: [zero]\n    front: {front}\n"
        f"    back: '{back}'\n"
    )
    return text + (f"    calc: {calc}\n" if calc else "") + extra


def _deck(root, cards, name="05_x.yaml"):
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text("cards:\n" + "".join(cards))
    return root


@pytest.mark.parametrize(
    "cards, expected",
    [
        ([_card_yaml("a", extra="    frnt: typo\n")], "unknown field(s) ['frnt']"),
        ([_card_yaml("a"), _card_yaml("a")], "duplicate id"),
        (["  - id: a\n    topics: [x]\n    front: Q\n    back: A\n"], "missing 'lab'"),
        ([_card_yaml("a", lab='"99"')], "lab must be one of"),
        (
            [_card_yaml("a", back="{value}", calc="{fn: __import__, args: {name: os}}")],
            "is not an allowed calculator",
        ),
        (
            [_card_yaml("a", back="{value}", calc="{fn: amdahl_limit, args: {s: 0.05}}")],
            "bad arguments for amdahl_limit",
        ),
        (
            [
                _card_yaml(
                    "a", back="{value}", calc="{fn: amdahl_limit, args: {serial_fraction: 2}}"
                )
            ],
            "fraction between 0 and 1",
        ),
        (
            [
                _card_yaml(
                    "a",
                    back="{value}",
                    calc="{fn: bubble, args: {schedule: gpipe, p: 4, m: 4}, field: nope}",
                )
            ],
            "has no field 'nope'",
        ),
        (
            [
                _card_yaml(
                    "a", back="{valeu}", calc="{fn: amdahl_limit, args: {serial_fraction: 0.5}}"
                )
            ],
            "placeholder {valeu} has no calc value",
        ),
        (
            [
                _card_yaml(
                    "a", back="no number", calc="{fn: amdahl_limit, args: {serial_fraction: 0.5}}"
                )
            ],
            "never shown",
        ),
        (
            [
                _card_yaml(
                    "a",
                    back="{value}",
                    calc="{fn: amdahl_limit, args: {serial_fraction: 0.5}, unit: parsecs}",
                )
            ],
            "unknown unit 'parsecs'",
        ),
        ([_card_yaml("a", extra="    back: twice\n")], "duplicate key 'back'"),
        ([_card_yaml("a", back="at $3 per GPU-hour: $1.5M")], "typesets as LaTeX"),
    ],
)
def test_broken_decks_give_readable_errors(tmp_path, cards, expected):
    deck = _deck(tmp_path, cards)
    with pytest.raises(DeckError) as info:
        load_deck(deck_dir=deck)
    assert expected in str(info.value) and "05_x.yaml" in str(info.value)
    assert any(expected in p for p in check_deck(deck))
    out = io.StringIO()
    assert cli_main(["--self-test", "--deck", str(deck)], stdout=out) == 1
    assert "FAILED" in out.getvalue() and expected in out.getvalue()


def test_self_test_also_checks_coverage(tmp_path):
    problems = check_deck(_deck(tmp_path, [_card_yaml("only-one")]))
    assert "lab 05 has 1 card(s)" in " ".join(problems)
    assert sum("misconception tag" in p for p in problems) == len(MISCONCEPTIONS)


# --- Leitner boxes and the progress file -------------------------------------------------


def test_leitner_transitions_and_schedule():
    assert [interval(b) for b in range(1, 6)] == [1, 2, 4, 8, 16]
    s = None
    for expected_box in (2, 3, 4, 5, 5):
        s = answer(s, True, session=1)
        assert s.box == expected_box
    assert (s.seen, s.correct) == (5, 5)
    s = answer(s, False, session=2)
    assert (s.box, s.last_session, s.seen, s.correct) == (1, 2, 6, 5)
    box3 = CardState(box=3, last_session=2, seen=2, correct=2)
    assert not is_due(box3, 5) and is_due(box3, 6)  # box 3: every 4th session
    assert is_due(None, 1) and is_due(answer(None, False, 1), 2)


def test_progress_round_trip_is_atomic_and_path_is_overridable(tmp_path, monkeypatch):
    p = Progress(sessions=3, cards={"a": CardState(2, 3, 4, 1), "b": CardState()})
    path = save_progress(p, tmp_path / "deep" / "p.json")
    back = load_progress(path)
    assert back.sessions == 3 and back.cards == p.cards
    assert [f.name for f in path.parent.iterdir()] == ["p.json"]  # no temporary file left
    monkeypatch.setenv("LAB_CARDS_PROGRESS", str(tmp_path / "env.json"))
    assert progress_path() == tmp_path / "env.json"
    assert progress_path(tmp_path / "arg.json") == tmp_path / "arg.json"
    monkeypatch.delenv("LAB_CARDS_PROGRESS")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert progress_path() == tmp_path / ".distributed_labs" / "cards_progress.json"


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"version": 1, "sessions": 2, "cards": '
        '{"a": {"box": 9, "last_session": 1, "seen": 1, "correct": 1}}}',
    ],
)
def test_corrupted_progress_is_backed_up_never_overwritten(progress_file, content):
    progress_file.parent.mkdir(parents=True)
    progress_file.write_text(content)
    with pytest.warns(UserWarning, match="could not be read"):
        p = load_progress()
    assert p.sessions == 0 and not p.cards and "moved to" in p.notice
    (backup,) = progress_file.parent.glob("cards.json.corrupt-*")
    assert backup.read_text() == content and not progress_file.exists()
    save_progress(p)
    assert backup.read_text() == content


def test_store_writes_nothing_until_an_answer_and_counts_one_session(progress_file):
    store = ProgressStore()
    assert not progress_file.exists() and store.current_session == 1
    store.record("a", True)
    store.record("b", False)
    other = ProgressStore()  # a second notebook open at the same time
    assert other.current_session == 2
    other.record("c", True)
    store.record("a", True)  # re-reads the file: c survives
    saved = load_progress()
    assert saved.sessions == 2 and {k: v.box for k, v in saved.cards.items()} == {
        "a": 3,
        "b": 1,
        "c": 2,
    }


def test_session_serves_due_cards_lowest_box_first():
    cards = load_deck(labs="07")[:4]
    # box 3 comes back every 4th session: seen in session 7, due in session 11
    save_progress(
        Progress(
            sessions=10,
            cards={cards[0].id: CardState(3, 7, 1, 1), cards[1].id: CardState(2, 10, 1, 1)},
        )
    )
    store = ProgressStore()
    session = ReviewSession(cards, store)
    assert cards[1] not in session.queue  # box 2, seen last session: not due yet
    assert session.queue[-1].id == cards[0].id  # box 3 comes after new cards (box 1)
    with pytest.raises(ValueError, match="show the answer"):
        session.answer(True)
    for knew in (True, True, False):
        session.reveal()
        session.answer(knew)
    assert session.current is None and session.summary().startswith("You knew 2 of 3")
    assert store.progress.sessions == 11
    missed = session.queue[2].id
    again = ReviewSession(cards, ProgressStore())
    # session 12: the missed card (box 1) and the box-2 card last seen in session 10
    assert [c.id for c in again.queue] == [missed, cards[1].id]
    assert len(ReviewSession(cards, ProgressStore(), due_only=False).queue) == 4


# --- widget and terminal quiz --------------------------------------------------------------


def test_review_widget_driven_by_clicks(progress_file):
    w = review_widget(lab="04", limit=3)
    first = w.session.current
    assert first.lab == "04" and w.lab.value == "04"
    assert first.front.split()[0] in w.front.value and w.back.value == ""
    assert w.knew_button.disabled and w.missed_button.disabled and not progress_file.exists()
    w.knew_button.click()  # ignored before the answer is shown
    assert w.session.answered == 0
    w.show_button.click()
    assert text_html(first.back) in w.back.value
    assert not w.knew_button.disabled and w.show_button.disabled
    w.knew_button.click()
    second = w.session.current
    w.show_button.click()
    w.missed_button.click()
    boxes = {k: v.box for k, v in load_progress().cards.items()}
    assert boxes == {first.id: 2, second.id: 1}
    assert "box 1: 1" in w.counts.value and "box 2: 1" in w.counts.value
    w.show_button.click()
    w.knew_button.click()
    assert w.session.current is None and "Session done" in w.status.value
    w.lab.value = "10"  # filter by another lab: a new selection, same session number
    assert w.session.current.lab == "10" and w.store.session == 1


def test_review_widget_shows_nothing_due_and_corruption_notice(progress_file):
    w = review_widget(lab="00", limit=1)
    w.show_button.click()
    w.knew_button.click()
    progress_file.write_text("garbage")
    w2 = review_widget(topics="myth-dataparallel")
    assert "could not be read" in w2.notice.value
    one = review_widget(topics="preflight")
    one.show_button.click()
    one.knew_button.click()
    again = review_widget(topics="preflight")
    assert again.session.current is None and "No card is due" in again.status.value
    again.due_only.value = False
    assert again.session.current is not None


def test_cli_quiz_with_piped_answers(progress_file):
    out = io.StringIO()
    rc = cli_main(["--lab", "05", "--n", "3"], stdin=io.StringIO("y\nmaybe\nn\n"), stdout=out)
    text = out.getvalue()
    assert rc == 0 and "please answer y or n" in text and "31.4 GB" in text
    assert "You knew 1 of 2" in text  # input ended after two answers: the quiz stops quietly
    boxes = sorted(s.box for s in load_progress().cards.values())
    assert boxes == [1, 2]


def test_cli_interactive_list_self_test_and_bad_input(tmp_path):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = io.StringIO()
    path = tmp_path / "p.json"
    assert (
        cli_main(["--topic", "amdahl", "--progress", str(path)], stdin=Tty("\ny\nq\n"), stdout=out)
        == 0
    )
    assert "[Enter] show the answer" in out.getvalue() and len(load_progress(path).cards) == 1
    out = io.StringIO()
    assert cli_main(["--lab", "07", "--list"], stdout=out) == 0
    assert out.getvalue().count("  Q: ") == len(load_deck(labs="07")) and "21.9%" in out.getvalue()
    out = io.StringIO()
    assert cli_main(["--self-test"], stdout=out) == 0 and "self-test OK" in out.getvalue()
    assert cli_main(["--lab", "99"]) == 2
    assert cli_main(["--n", "0"]) == 2
    assert cli_main(["--bogus"]) == 2


def test_python_dash_m_with_a_pipe(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), LAB_CARDS_PROGRESS=str(tmp_path / "p.json"))
    res = subprocess.run(
        [sys.executable, "-m", "lab_utils.cards", "--lab", "01", "--n", "2"],
        input="y\ny\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "You knew 2 of 2" in res.stdout
    assert json.loads((tmp_path / "p.json").read_text())["sessions"] == 1
