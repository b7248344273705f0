"""A run longer than 2 s shows a live status line in a notebook, rewritten in place and emptied
at the end (issue 37 item 6: lab 07's 74 s cell showed only [*]); nothing in scripts and tests."""

from lab_utils.runtime.engine.status import StatusLine, wanted


def shell_outputs(code: str) -> list:
    """Run code in an IPython shell; every display (and display update) it published."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()  # before the capture, which hooks the shell's display
    with capture_output() as captured:
        shell.run_cell(code).raise_error()
    return captured.outputs


def test_no_status_line_outside_a_notebook_kernel(monkeypatch):
    monkeypatch.delenv("LAB_UTILS_PROGRESS", raising=False)
    monkeypatch.setenv("LAB_QUICK", "0")
    assert not wanted()  # pytest, an IPython shell: no Jupyter kernel
    monkeypatch.setenv("LAB_UTILS_PROGRESS", "1")
    assert wanted()
    monkeypatch.setenv("LAB_QUICK", "1")
    monkeypatch.setenv("LAB_UTILS_PROGRESS", "")
    assert not wanted()  # quick mode (nbval): never


def test_the_line_appears_after_two_seconds_is_rewritten_in_place_and_emptied():
    outs = shell_outputs(
        "from lab_utils.runtime.engine.status import StatusLine\n"
        "s = StatusLine(4, enabled=True)\n"
        "for t, done in ((0.5, 0), (1.9, 0), (2.2, 1), (2.4, 1), (3.1, 3)):\n"
        "    s.tick(t, done)\n"
        "s.clear()"
    )
    texts = [(o.update, o.data["text/plain"]) for o in outs]
    assert texts == [
        (False, "[lab_utils] 4 ranks running: 2 s, 1 of 4 done"),
        (True, "[lab_utils] 4 ranks running: 3 s, 3 of 4 done"),
        (True, ""),
    ]
    quiet = StatusLine(4, enabled=False)
    quiet.tick(5.0, 1)
    quiet.clear()
    assert quiet.handle is None
