"""Committed predictions (lab_utils.exercises.predict) and the one table helper (viz.table)."""

import json

import pytest

from lab_utils.exercises import history, predict
from lab_utils.exercises.predict import off_by, parse_number
from lab_utils.viz import Table


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "predictions.json"
    monkeypatch.setenv("LAB_PREDICTIONS", str(path))
    monkeypatch.setenv("LAB_QUICK", "0")
    return path


def test_reveal_is_hidden_until_a_guess_is_committed(store):
    p = predict("05.zero2_bytes", "ZeRO-2 bytes per step, relative to DDP", unit="x DDP")
    assert not p.committed
    out = p.reveal(formula=1.0, measured=1.0)
    assert "Commit your prediction" in out.value and "1.0" not in out.value
    p.commit("0.5")
    assert "formula" in out.value and "measured" in out.value and "0.5" in out.value
    assert "2x too small" in out.value  # 0.5 against 1.0
    saved = json.loads(store.read_text())
    assert saved["05.zero2_bytes"]["guess"] == 0.5
    assert [h["key"] for h in history("05")] == ["05.zero2_bytes"] and history("04") == []


def test_a_prediction_is_made_once_and_bad_input_is_named(store):
    p = predict("03.ring_sends", "messages per rank", answer=6)
    with pytest.raises(ValueError, match="already committed"):
        p.commit(7)
    q = predict("03.ring_bytes", "bytes per rank")
    for bad in ("abc", "2.5.1", "", "nan", "inf"):
        with pytest.raises(ValueError, match="not a"):
            q.commit(bad)
    assert not q.committed
    with pytest.raises(ValueError, match="<lab>.<name>"):
        predict("ring", "no lab prefix")


def test_quick_mode_uses_the_preset_and_does_not_store_it(store, monkeypatch):
    monkeypatch.setenv("LAB_QUICK", "1")
    p = predict("07.bubble", "bubble fraction", quick_guess=0.5)
    assert p.committed and p.preset and p.value == 0.5
    assert not store.exists()  # a preset is not the learner's guess
    with pytest.raises(ValueError, match="quick_guess"):
        predict("07.other", "no preset given")


def test_multiple_choice(store):
    p = predict(
        "07.smaller_bubble",
        "Which schedule has the smaller bubble?",
        choices=["GPipe", "1F1B", "the same"],
        answer="1F1B",
    )
    assert p.comparison(answer="the same")[0]["verdict"] == "not this time"
    with pytest.raises(ValueError, match="choose one of"):
        predict("07.x", "?", choices=["a", "b"], answer="c")


def test_off_by_and_parse_number():
    assert off_by(1.05, 1.0).startswith("within 5%")
    assert off_by(4.0, 1.0) == "4x the answer" and off_by(0.25, 1.0) == "4x too small"
    assert (
        parse_number("1,200") == 1200
        and parse_number("3_000") == 3000
        and parse_number("1e9") == 1e9
    )


def test_table_text_and_html():
    t = Table(
        [
            {"impl": "ours", "ms": 49.6, "bytes": 180480},
            {"impl": "torch", "ms": 53.41, "bytes": 180480},
        ],
        title="DDP",
        units={"bytes": "B"},
    )
    text = str(t).splitlines()
    assert text[0] == "DDP" and text[1].split() == ["impl", "ms", "bytes", "(B)"]
    assert "180,480" in text[3] and text[3].endswith("180,480")
    assert "<table>" in t._repr_html_() and "53.41" in t._repr_html_()
    with pytest.raises(ValueError, match="columns"):
        Table([[1, 2]])
    assert "1.5" in str(Table([[1.5, "x"]], columns=["a", "b"]))


def test_revealed_guesses_come_back_in_the_review_widget(store, tmp_path):
    """Issue 16.1: guesses are kept with the flashcard progress and shown again in review."""
    from lab_utils.cards import review_widget

    p = predict(
        "04.bytes_per_step", "Bytes one rank sends per step, as a multiple of P?", unit="x P"
    )
    p.reveal(formula=1.5, measured=1.52)
    p.commit("3")  # the reveal fills in (and is stored) now
    saved = json.loads(store.read_text())["04.bytes_per_step"]
    assert saved["guess"] == 3 and saved["formula"] == 1.5 and saved["measured"] == 1.52
    assert saved["verdict"] == "1.97x the answer"  # 3 against the measured 1.52
    w = review_widget(lab="04", progress=tmp_path / "cards.json")
    assert "Your predictions in lab 04" in w.predictions.value
    assert "Bytes one rank sends per step" in w.predictions.value and "1.52" in w.predictions.value
    w.lab.value = "05"
    assert w.predictions.value == ""  # no guess committed in lab 05


def test_typed_formats_people_use_are_read_in_the_question_unit(store):
    """Issue 37.6: "5/8" for a fraction, "20%" for a percentage, sizes and multiples with units."""
    from lab_utils.exercises.typed_guess import read_guess

    assert parse_number("5/8") == 0.625 and parse_number("0.5x") == 0.5 and read_guess(".5") == 0.5
    assert read_guess("20%", "%") == 20 and read_guess("20%", "of the step") == 0.2
    assert read_guess("64 KB", "B") == 64_000 and read_guess("64 KiB", "B") == 65_536
    assert read_guess("1,000 TB", "TB") == 1000 and read_guess("2 h", "minutes") == 120
    assert read_guess("1.25 x DDP", "x DDP") == 1.25 and read_guess("1e9", "FLOP/B") == 1e9
    for bad, unit, why in [
        ("1/0", "", "divides by zero"),
        ("2x", "B", "a multiple"),
        ("5 apples", "B", "expected a number in B"),
        ("1e999", "", "finite"),
    ]:
        with pytest.raises(ValueError, match=why):
            read_guess(bad, unit)
    p = predict("09.drop", "% of assignments dropped?", unit="%")
    p.commit("20%")
    assert p.value == 20


def run_cells(*cells: str) -> list:
    """Run cells in an IPython shell; every display (and display update) they published."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    with capture_output() as captured:
        for cell in cells:
            shell.run_cell(cell).raise_error()
    return captured.outputs


def test_a_cell_ending_with_a_prediction_reveal_or_table_shows_it_once(store):
    """Issue 37.6: a cell ending with the prediction's name showed a second, stale "not committed
    yet" box; a reveal or show_table as a cell's last line showed twice."""
    setup = "from lab_utils.exercises import predict\nfrom lab_utils.viz import show_table\n"
    outs = run_cells(
        setup + "g = predict('09.a', 'How many?', unit='B')\ng",
        "g.reveal(formula=2.0, measured=2.0)",
        "show_table([{'a': 1}])",
        "g.commit('2 KB')",
    )
    fresh = [o for o in outs if not o.update]
    assert len(fresh) == 3, [o.data.keys() for o in fresh]  # input, reveal, table: once each
    assert "application/vnd.jupyter.widget-view+json" in fresh[0].data
    assert all("not committed yet" not in o.data.get("text/html", "") for o in outs)
    updates = [o.data["text/html"] for o in outs if o.update]
    assert len(updates) == 2  # the input's, the reveal's
    assert "committed: <b>2000</b> B" in updates[0] and "<script>" in updates[0]
    assert "1e+03x the answer" in updates[1]  # 2000 B against 2 B
    # what a reopened notebook keeps: plain HTML, no widget
    assert all("application/vnd.jupyter.widget-view+json" not in o.data for o in outs if o.update)


def test_enter_commits_and_choices_show_whole_and_chosen(store):
    """Issue 37.6: Enter in the text box commits what was typed (the text travels with the request:
    typed_box.py); multiple choice shows every option whole (one radio button each) and, once
    committed, which one was chosen."""
    from lab_utils.exercises.predict import Prediction
    from lab_utils.exercises.predict_view import _input_widget, committed_html

    p = Prediction("05.frac", "ZeRO-1 as a fraction of DDP?", unit="x DDP")
    view = _input_widget(p)
    box, error = view.children[1], view.children[2]
    assert box.placeholder == "a number (x DDP)"
    box._handle_custom_msg({"type": "commit", "text": "five eighths"}, [])  # what Enter sends
    assert not p.committed and "not a number" in error.value
    box._handle_custom_msg({"type": "something else"}, [])
    box._handle_custom_msg({"type": "commit", "text": "5/8"}, [])
    assert p.value == 0.625
    choices = ["that block only", "the root and that block", "the root, that block and the next"]
    q = Prediction("05.held", "What is held?", choices=tuple(choices))
    radio, commit = _input_widget(q).children[1].children
    commit.click()
    assert not q.committed  # nothing chosen: nothing committed
    radio.value = choices[2]
    commit.click()
    shown = committed_html(q)
    assert all(c in shown for c in choices) and shown.count("your choice") == 1
    assert shown.index("your choice") > shown.index(choices[2])


def test_a_reveal_holds_back_the_table_that_shows_the_answer_until_the_commit(store):
    """Issue 36 item 2: under Run All a table printed beside the hidden reveal showed the number;
    reveal(show=Table(...)) displays it only once a guess is committed, in place. The reveal's
    output carries the numbers it holds back (metadata), which the executed-notebook audit
    (tools/answer_leaks.py) looks for in nearby outputs."""
    from lab_utils.exercises.predict_view import REVEAL_META

    outs = run_cells(
        "from lab_utils.exercises import predict\nfrom lab_utils.viz import Table\n"
        "g = predict('10.amdahl', 'Speed-up at N=8?', unit='x')",
        "g.reveal(formula=5.926, show=Table([{'N': 8, 'speed-up': 5.926}]))",
    )
    fresh = [o for o in outs if not o.update]
    assert all("5.926" not in str(o.data) for o in outs)  # nothing says it yet
    assert fresh[1].metadata[REVEAL_META] == {"key": "10.amdahl", "values": [5.926]}
    assert fresh[2].data == {"text/plain": ""}  # the table's place, empty
    outs = run_cells("g.commit('6x')")
    assert any(
        "5.926" in o.data.get("text/html", "") and "<table" in o.data["text/html"]
        for o in outs
        if o.update
    )
