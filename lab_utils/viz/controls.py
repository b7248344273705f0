"""The controls explorers are built from: dropdowns, checkboxes and number boxes that never lie.

A number box keeps the TEXT the learner typed, so "2.5" in a whole-number box reaches the
explorer's ``validate`` and gets the error box instead of silently becoming 25 (see NumberText).
"""

from __future__ import annotations

import numbers
from typing import Any

import ipywidgets as widgets
from traitlets import Float, Int, TraitError, Unicode, Union, validate

from lab_utils.calc._check import parse_number


def dropdown(description: str, options: Any, value: Any) -> widgets.Dropdown:
    return widgets.Dropdown(description=description, options=options, value=value)


class NumberText(widgets.Text):
    """A number box whose TEXT reaches Python unchanged, to be parsed and checked there.

    ipywidgets' IntText filters keystrokes in the browser: typing "2.5" drops the dot and
    stores 25, and FloatText turns "abc" back into the old value, so a wrong entry silently
    becomes a different number. Here the text is parsed by ``calc._check.parse_number``
    ("2.5" -> 2.5) and ``validate`` runs the calculators' own checks (``pos_int``,
    ``number``...), so a whole-number box shows the error box for 2.5. Assigning a number in
    code stores its text (``box.value = 8`` -> "8"). ``whole`` marks whole-number boxes.
    """

    # accept numbers from code too (converted to text by _coerce); the browser sees a string
    value = Union([Unicode(), Int(), Float()], default_value="", help="the text in the box").tag(
        sync=True
    )

    def __init__(self, description: str, value: float, whole: bool) -> None:
        super().__init__(
            description=description, value=_as_text(value), continuous_update=False
        )  # commit on Enter / leaving the box
        self.whole = whole

    @validate("value")
    def _coerce(self, proposal: Any) -> str:
        value = proposal["value"]
        if isinstance(value, str):
            return value
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TraitError(f"a number box holds a number or its text, not {value!r}")
        return _as_text(value)

    @property
    def number(self) -> Any:
        """The parsed entry: int, float, or the text when it is not a number."""
        return parse_number(self.value)


def _as_text(value: Any) -> str:
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return repr(float(value))


def int_text(description: str, value: int) -> NumberText:
    # Text, not IntText or Bounded: every entry, 2.5 or -3 included, must reach validate()
    # and get a message instead of being silently truncated or clamped.
    return NumberText(description, value, whole=True)


def float_text(description: str, value: float) -> NumberText:
    return NumberText(description, value, whole=False)


def checkbox(description: str, value: bool) -> widgets.Checkbox:
    return widgets.Checkbox(description=description, value=value, indent=False)
