"""The convention that no prediction is answered before it is asked (lab_utils.tools.giveaways):
it fails on lab 07's interleaved-bubble cells as they were (the formula in the text right above
the predict call) and passes once the formula moves after the commit."""

from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from lab_utils.tools.giveaways import formulas, given_away

TEXT_WITH_FORMULA = (
    "## 3. Interleaved 1F1B: `v` model chunks per rank\n\nThe fill and drain are made of these "
    "shorter operations, so they shrink by `v`: the idle time is `(p-1)(t_f + t_b)/v`, a bubble "
    "of `(p-1)/(v·m)` of the ideal time."
)
PREDICT = (
    'guess_inter = predict("07.interleaved_bubble", "Interleaved 1F1B: fraction of the '
    'step a rank idles?", unit="of the step", quick_guess=0.2)'
)
REVEAL = (
    "guess_inter.reveal(formula=0.1, measured=0.1,\n"
    '                   why="fill and drain are made of operations v times shorter: idle '
    '(p-1)(t_f + t_b)/v")'
)


def notebook(*cells):
    return new_notebook(cells=list(cells))


def test_fails_on_lab_07_as_it_was():
    nb = notebook(
        new_markdown_cell(TEXT_WITH_FORMULA), new_code_cell(PREDICT), new_code_cell(REVEAL)
    )
    (msg,) = given_away(nb)
    assert "07.interleaved_bubble" in msg and "(p-1)(t_f+t_b)/v" in msg


def test_passes_when_asked_first_and_derived_after():
    nb = notebook(
        new_markdown_cell("## 3. Interleaved 1F1B\n\nWhat does it do to idle time?"),
        new_code_cell(PREDICT),
        new_markdown_cell(TEXT_WITH_FORMULA),
        new_code_cell(REVEAL),
    )
    assert given_away(nb) == []


def test_an_earlier_section_may_state_it_and_choices_are_skipped():
    nb = notebook(
        new_markdown_cell(TEXT_WITH_FORMULA),
        new_markdown_cell("## 4. Next"),
        new_code_cell(PREDICT),
        new_code_cell(REVEAL),
    )
    assert given_away(nb) == []
    choice = notebook(
        new_markdown_cell(TEXT_WITH_FORMULA),
        new_code_cell(PREDICT),
        new_code_cell('guess_inter.reveal(answer="a", why="not (p-1)(t_f + t_b)/v")'),
    )
    assert given_away(choice) == []


def test_formula_fragments():
    assert formulas("idle (p-1)(t_f + t_b)/v") == ["(p-1)(t_f+t_b)/v"]
    assert formulas("defers W by 2(p-1) rounds: 2p - 1 in flight") == []  # too generic
    assert formulas("sbh(10 + 24/t): replicated") == ["sbh(10+24/t)"]
