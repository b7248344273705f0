"""Is ONE value valid: types, ranges, choices, sequences, units, and what a number box typed.

Each check returns the clean value or raises ``ValueError`` naming the argument, the value,
what was expected and how to fix it (see the package docstring for the coercions refused).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Iterable, Sequence

# No quantity in this course comes within 70 orders of magnitude of this (a training run is
# ~1e25 FLOPs), so a bigger input is a typo; keeping inputs below it also keeps every product
# of two or three of them finite in floating point.
MAX_MAGNITUDE = 1e100


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: object) -> str:
    """How a wrong value is named in a message ("the bool True", "the string '2'")."""
    if isinstance(value, bool):
        return f"the bool {value!r}"
    if isinstance(value, str):
        return f"the string {_show(value)}"
    if value is None:
        return "None"
    if isinstance(value, numbers.Number):
        return _show(value)
    return f"{_show(value)} (a {type(value).__name__})"


def whole(
    name: str, value: object, lo: int | None = None, hi: int | None = None, hint: str = ""
) -> int:
    """An int (numpy ints too) in [lo, hi]; refuses bools, floats (even 2.0) and strings."""
    if (
        type(value) is int
        and abs(value) <= MAX_MAGNITUDE
        and (lo is None or value >= lo)
        and (hi is None or value <= hi)
    ):
        return value  # the common, valid case, without building any message
    bound = (f" >= {lo}" if hi is None else f" in {lo}..{hi}") if lo is not None else ""
    what = f"{name} must be a whole number{bound}"
    fix = f"; {hint}" if hint else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer() and abs(value) < MAX_MAGNITUDE:
            fix = f"; write {int(value)} (an int), not {value!r}" + fix
        elif isinstance(value, str):
            fix = "; a number is needed, not text" + fix
        elif isinstance(value, bool):
            fix = f"; a bool is not a count: pass e.g. {name}=1" + fix
        raise ValueError(f"{what}, got {_kind(value)}{fix}")
    v = int(value)
    if abs(v) > MAX_MAGNITUDE:
        raise ValueError(
            f"{what}, got a {len(str(abs(v)))}-digit number; that is beyond any "
            f"real size (> 1e100): check for a typo{fix}"
        )
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{what}, got {v}{fix}")
    return v


def pos_int(name: str, value: object, hint: str = "") -> int:
    """A whole number >= 1 (a count: ranks, layers, tokens)."""
    return whole(name, value, 1, hint=hint)


def nonneg_int(name: str, value: object, hint: str = "") -> int:
    """A whole number >= 0."""
    return whole(name, value, 0, hint=hint)


def index(name: str, value: object, n: int, of: str) -> int:
    """A position 0..n-1, e.g. a pipeline stage of ``of`` = "pp=4"."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < n:
        raise ValueError(
            f"{name} must be in 0..{n - 1} for {of}, got {_kind(value)}; {name}s are counted from 0"
        )
    return int(value)


def number(
    name: str,
    value: object,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    expected: str = "",
    hint: str = "",
) -> float:
    """A finite real number (ints allowed) in the given range, returned as float."""
    if (type(value) is float or type(value) is int) and abs(value) <= MAX_MAGNITUDE:
        v = float(value)  # the common, valid case, without building any message (int vs float
        if (lo is None or v > lo or (v == lo and not lo_open)) and (hi is None or v <= hi):
            return v  # compares exactly, so a huge int never overflows; NaN takes the slow path
    if not expected:
        expected = (
            "a number"
            if lo is None
            else ("a positive number" if lo == 0 and lo_open else f"a number >= {lo:g}")
        )
        if hi is not None:
            expected += f" <= {hi:g}"
    what = f"{name} must be {expected}"
    fix = f"; {hint}" if hint else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        if isinstance(value, str):
            fix = "; a number is needed, not text" + fix
        raise ValueError(f"{what}, got {_kind(value)}{fix}")
    if isinstance(value, numbers.Integral) and abs(int(value)) > MAX_MAGNITUDE:
        raise ValueError(
            f"{what}, got a {len(str(abs(int(value))))}-digit number; that is "
            f"beyond any real size (> 1e100): check for a typo{fix}"
        )
    v = float(value)
    if math.isnan(v):
        raise ValueError(
            f"{what}, got NaN (not a number; computed values turn NaN after 0/0 or inf - inf){fix}"
        )
    if math.isinf(v) or abs(v) > MAX_MAGNITUDE:
        raise ValueError(
            f"{what}, got {v!r}: an infinite or absurdly large value (> 1e100) "
            f"is a typo or an overflow upstream{fix}"
        )
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise ValueError(f"{what}, got {_show(value)}{fix}")
    if hi is not None and v > hi:
        raise ValueError(f"{what}, got {_show(value)}{fix}")
    return v


def pos_num(name: str, value: object, hint: str = "") -> float:
    """A finite number > 0."""
    return number(name, value, 0, lo_open=True, hint=hint)


def nonneg_num(name: str, value: object, hint: str = "") -> float:
    """A finite number >= 0."""
    return number(name, value, 0, hint=hint)


def fraction(name: str, value: object, hint: str = "") -> float:
    """A number in [0, 1] (e.g. a serial fraction, an MFU); 5% is 0.05."""
    return number(
        name, value, 0, 1, expected="a fraction between 0 and 1", hint=hint or "write 5% as 0.05"
    )


def boolean(name: str, value: object) -> bool:
    """True or False (numpy bools too); refuses 'no', 0, 1 and None."""
    if value is True or value is False or type(value).__name__ == "bool_":
        return bool(value)
    raise ValueError(
        f"{name} must be True or False, got {_kind(value)}; "
        + (
            "a non-empty string such as 'no' counts as True in Python, so pass the bool itself"
            if isinstance(value, str)
            else "pass the bool itself (0/1 and None are not accepted)"
        )
    )


def choice(name: str, value: object, options: Iterable[object]) -> Any:
    """One of ``options``, compared by type AND value (so True is not taken for 1)."""
    opts = options if isinstance(options, (tuple, list)) else list(options)
    for o in opts:
        if type(value) is type(o) and value == o:
            return value
    raise ValueError(f"{name} must be one of {', '.join(map(repr, opts))}; got {_kind(value)}")


def int_choice(name: str, value: object, options: Sequence[int], meaning: str = "") -> int:
    """A whole number from ``options`` (e.g. a ZeRO stage 0..3)."""
    v = whole(name, value, hint=meaning)
    if v not in options:
        raise ValueError(
            f"{name} must be {', '.join(map(str, options[:-1]))} or {options[-1]}"
            f"{f' ({meaning})' if meaning else ''}, got {v}"
        )
    return v


def text(name: str, value: object) -> str:
    """Free text (a name or a note)."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {_kind(value)}")
    return value


def instance(name: str, value: object, cls: type, example: str) -> Any:
    """An object of class ``cls``; ``example`` shows how to make one."""
    if not isinstance(value, cls):
        raise ValueError(f"{name} must be a {cls.__name__} (e.g. {example}), got {_kind(value)}")
    return value


def sequence(
    name: str, value: object, each: Callable[[str, object], Any], min_len: int = 0
) -> list:
    """A list, tuple (or numpy array, range) whose every element passes ``each``."""
    if isinstance(value, (str, bytes, dict, set, frozenset)) or not (
        hasattr(value, "__iter__") and hasattr(value, "__len__")
    ):
        raise ValueError(f"{name} must be a list or tuple, got {_kind(value)}")
    if len(value) < min_len:
        raise ValueError(f"{name} needs at least {min_len} values, got {len(value)}")
    return [each(f"each value in {name}", v) for v in value]  # type: ignore[union-attr]


def fields(record: object, check: Callable[[str, object], Any], names: Iterable[str]) -> None:
    """``check`` each named field of a record; messages name it "Class.field"."""
    owner = type(record).__name__
    for n in names:
        check(f"{owner}.{n}", getattr(record, n))


ZERO_STAGES = (0, 1, 2, 3)  # 0 = plain DDP; 1 shards optimizer state, 2 + gradients, 3 + weights


def zero_stage(stage: object) -> int:
    """A ZeRO stage 0..3 (Rajbhandari et al. 2020): THE check, used by every calculator,
    widget and technique that takes a stage (``calc.zero_stage``). Labs 01, 05, 08, 09, 12."""
    return int_choice(
        "zero_stage",
        stage,
        ZERO_STAGES,
        "0 = plain DDP, 1 = optimizer state sharded, 2 = + gradients, 3 = + weights",
    )


def parse_number(raw: object) -> object:
    """What a learner typed into a number box -> int, float, or the text unchanged.

    "4" -> 4, "2.5" -> 2.5, "1e9" -> 1e9, " 8 " -> 8, "1_000" -> 1000; anything else (empty,
    "abc", "2,5") stays a string, so the widget's check reports it ("got the string 'abc'").
    Numbers pass through. Widgets call this, then the same ``whole``/``number`` checks.
    """
    if not isinstance(raw, str):
        return raw
    s = raw.strip()
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)  # "nan" and "inf" parse too; the checks then refuse them
    except ValueError:
        return raw
