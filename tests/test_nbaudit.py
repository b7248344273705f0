"""The audit of an executed lab (lab_utils.tools.nbaudit): each finding the learners' walks met
(issue 37 item 5/6, issue 36 item 2), rebuilt as a cell, is named; the fixed cell passes.
tests/test_notebooks.py runs the audit on every lab it executes in full mode."""

from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from lab_utils.exercises.predict_view import REVEAL_META
from lab_utils.tools.answer_leaks import states
from lab_utils.tools.nbaudit import audit, prose_in_math

HIDDEN = "<div><i>Commit your prediction above to see the formula and the measurement.</i></div>"


def cell(*outputs, source="x = 1"):
    return new_code_cell(source, outputs=list(outputs))


def stream(text):
    return new_output("stream", name="stdout", text=text)


def html(text, **meta):
    return new_output("display_data", data={"text/html": text, "text/plain": "..."}, metadata=meta)


def reveal(key, *values):
    return html(HIDDEN, **{REVEAL_META: {"key": key, "values": list(values)}})


def findings(*cells):
    return audit(new_notebook(cells=list(cells)))


def test_a_traceback_in_a_graders_message_is_named_a_demonstration_is_not():
    grader = stream(
        "[NOT YET] zero1_step: rank 0 raised\nTraceback (most recent call last):\n"
        '  File "/home/me/lab_utils/parallel/zero.py", line 3\nRuntimeError: x\n'
    )
    (msg,) = findings(cell(grader))
    assert "cell 0" in msg and "grader" in msg and "zero1_step" in msg
    assert findings(cell(stream("[NOT YET] zero1_step: wrong group: pass group=group\n"))) == []
    demo = stream(
        "rank 2 raised IndexError\nOriginal traceback on rank 2:\n"
        'Traceback (most recent call last):\n  File "/x.py", line 4\n'
    )
    assert findings(cell(demo)) == []


def test_a_duplicated_output_and_a_stale_box_are_named():
    table = html("<table><tr><td>ZeRO-2</td><td>1.00x DDP bytes</td></tr></table>")
    assert "twice" in findings(cell(table, table))[0]
    stale = html("<div><b>Your prediction:</b> bytes?<br>not committed yet</div>")
    assert "stale" in findings(cell(stale))[0]
    # two hidden reveals of two predictions read alike: not a duplicate
    assert findings(cell(reveal("09.a", 1.5), reveal("09.b", 2.5))) == []
    assert "twice" in findings(cell(reveal("09.a", 1.5), reveal("09.a", 1.5)))[0]


def test_a_figure_whose_log_axis_reads_an_annotation_as_an_exponent_is_named():
    fig = {
        "data": [{"type": "bar", "x": ["EP=8", "EP=64"], "y": [120.0, 30.0]}],
        "layout": {
            "yaxis": {"type": "log"},
            "annotations": [{"x": 1, "y": 80, "text": "80 GB", "yref": "y"}],
        },
    }
    plotly = "application/vnd.plotly.v1+json"
    assert "beyond its data" in findings(cell(new_output("display_data", data={plotly: fig})))[0]
    fig["layout"]["annotations"][0]["y"] = 1.903  # log10(80): where plotly reads it
    assert findings(cell(new_output("display_data", data={plotly: fig}))) == []


def test_latex_eating_a_price_is_named_math_is_not():
    drill = "16. At $3 per GPU-hour, what does the run cost (answer in $M)?"
    assert prose_in_math(drill) and "LaTeX" in findings(new_markdown_cell(drill))[0]
    for fine in (
        r"goodput = $\tau / (M e^{R/M})$ and $1 - \delta/\tau$",
        "costs 3 USD, $x$",
        r"at \$3 per GPU-hour (in \$M)",
        "`$3 per hour and $M`",
        r"$t = \text{compute time per step}$",
    ):
        assert prose_in_math(fine) == [], fine
    assert prose_in_math(r"$3 \times 4$ and $2/3$") == []
    html_out = html("<td>$2.5/GPU-hour at 40% MFU</td><td>cost ($M)</td>")
    assert "LaTeX" in findings(cell(html_out))[0]


def test_numbers_match_at_their_printed_precision():
    assert states("ratio 0.625 of DDP", 0.6254) == "0.625" and states("62.5% of it", 0.625)
    assert states("1,376 B per rank", 1376.0) and states("1.376e+03 B", 1376.0)
    assert not states("0.62 of DDP", 0.625)  # two significant digits are too common to tell
    assert not states("0.64 of DDP", 0.625) and not states("x13760", 1376.0)


def test_an_answer_printed_near_its_prediction_is_named_held_back_it_is_not():
    ask = cell(source='g = predict("09.dispatch", "Bytes per rank?", unit="B", quick_guess=1)')
    table = html("<table><tr><td>dispatch bytes per rank</td><td>2,304</td></tr></table>")
    # printed by the reveal's own cell, beside the hidden reveal (lab 10 cell 6's Amdahl table)
    leaks = findings(
        new_markdown_cell("## 2. Dispatch"), ask, cell(table, reveal("09.dispatch", 2304.0))
    )
    assert len(leaks) == 1 and "2,304" in leaks[0] and "before the commit" in leaks[0]
    # stated before the ask: by an output or by the text of the section
    early = findings(
        new_markdown_cell("## 2. Dispatch\nEach rank sends 2304 B."),
        ask,
        cell(reveal("09.dispatch", 2304.0)),
    )
    assert "before it is asked" in early[0]
    # held back (reveal(show=...)): only the reveal holds it; a whole number < 1000 is no clue
    assert (
        findings(new_markdown_cell("## 2. Dispatch"), ask, cell(reveal("09.dispatch", 2304.0)))
        == []
    )
    assert findings(ask, cell(stream("4 ranks, 8 experts\n"), reveal("09.dispatch", 4))) == []
    # an earlier section may state it
    assert (
        findings(
            new_markdown_cell("## 1. 2304 B"),
            new_markdown_cell("## 2. Dispatch"),
            ask,
            cell(reveal("09.dispatch", 2304.0)),
        )
        == []
    )
