"""The ONE way calculators and widgets check their inputs (issue 21, "inputs that cannot lie").

Every public function of ``lab_utils.calc`` passes each argument through a function of this
package before using it, and every widget parses what the learner typed with ``parse_number``
and then runs the same checks. Each check returns the clean value or raises ``ValueError``
whose message says WHAT is wrong (the argument's name, the value, what was expected) and HOW
to fix it. Python's own coercions are refused on purpose, because each one hides a mistake:

    True for an int         bool is a subclass of int: zero_stage=True would mean stage 1
    2.0 for an int          a float count usually comes from a division that should not happen
    'no' for a bool         any non-empty string is truthy: offload_optimizer='no' means yes
    '2' for a number        a string from a text box or a config file, not yet converted
    NaN, inf, 10**400       NaN passes every comparison test as False; 10**400 overflows float

``tests/test_calc_validation.py`` feeds random bad values (hypothesis) to every function in
``calc.__all__`` and accepts nothing but a ValueError naming the argument.

    values   one value: whole, number (pos_*, nonneg_*, fraction), boolean, choice, text,
             instance, sequence, fields (a record's fields), zero_stage, parse_number (a
             number box's text)
    units    unit plausibility: flop_rate, byte_count, byte_rate
    shapes   between values: at_most, divides, heads_and_tp, degrees_multiply,
             interleaved_shape, one_chunk, sequence_split, backward_split, megatron_run
"""

from lab_utils.calc._check.shapes import (
    at_most,
    backward_split,
    degrees_multiply,
    divides,
    heads_and_tp,
    interleaved_shape,
    megatron_run,
    one_chunk,
    sequence_split,
)
from lab_utils.calc._check.units import byte_count, byte_rate, flop_rate
from lab_utils.calc._check.values import (
    MAX_MAGNITUDE,
    ZERO_STAGES,
    boolean,
    choice,
    fields,
    fraction,
    index,
    instance,
    int_choice,
    nonneg_int,
    nonneg_num,
    number,
    parse_number,
    pos_int,
    pos_num,
    sequence,
    text,
    whole,
    zero_stage,
)

__all__ = [
    "at_most",
    "backward_split",
    "degrees_multiply",
    "divides",
    "heads_and_tp",
    "interleaved_shape",
    "megatron_run",
    "one_chunk",
    "sequence_split",
    "MAX_MAGNITUDE",
    "ZERO_STAGES",
    "boolean",
    "byte_count",
    "byte_rate",
    "choice",
    "fields",
    "flop_rate",
    "fraction",
    "index",
    "instance",
    "int_choice",
    "nonneg_int",
    "nonneg_num",
    "number",
    "parse_number",
    "pos_int",
    "pos_num",
    "sequence",
    "text",
    "whole",
    "zero_stage",
]
