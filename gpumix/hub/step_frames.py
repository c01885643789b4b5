"""An agent's columnar step frame (gpumix/wire/step_columns.py) read as the steps parse_step gives.

Row i of the frame is the step message with those fields, and parse_steps(frame) is exactly
[parse_step(row i) for each row] (tests/test_hub_step_frames.py checks it on random and hostile frames);
or, where any row would be a protocol error, or the frame's shape is wrong (n out of bounds, a column of
another length), a ProtocolError and nothing of the frame counts. Each column is checked at once: its
value types in one set, its range by min and max, NaN by its sum, all in C; only a column that fails this
test is checked value by value, as parse_step does (issue 13: those checks per field and per step, with
the decode of one message per step, were most of the hub's CPU per step).

What it may import: gpumix.hub.ranks, gpumix.wire.
"""

from __future__ import annotations

import math
from typing import Any

from gpumix.hub.ranks import STEP_RANGES
from gpumix.wire.protocol import ProtocolError, integer, number
from gpumix.wire.step_columns import MAX_FRAME_STEPS
from gpumix.wire.step_message import AMP_DTYPES, MAX_STEP_INDEX, STEP_TIME_RANGE_S

# a parsed step's fields in parse_step's order (its rejections are named in this order too)
ROW_FIELDS = ("step", "step_time_s", *STEP_RANGES, "amp_dtype")
_NUMBERS = {float, int, type(None)}
_DTYPES = {*AMP_DTYPES, None}
# a number field's range, for a shared value (not "step": an integer kept as sent, not a float)
_PLAIN_RANGES = {"step_time_s": STEP_TIME_RANGE_S, **STEP_RANGES}


def parse_steps(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps of a "steps" message, each as parse_step gives it; ProtocolError for a bad frame."""
    n = message.get("n")
    columns = message.get("columns")
    if type(n) is not int or not 1 <= n <= MAX_FRAME_STEPS:
        raise ProtocolError(f"'n' must be an integer from 1 to {MAX_FRAME_STEPS}")
    if not isinstance(columns, dict):
        raise ProtocolError("'columns' must be an object")
    shared = dict.fromkeys(ROW_FIELDS)  # what every row holds: absent fields (None) and shared values
    names: list[str] = []  # the columns that vary, and their values
    values: list[list[Any]] = []
    rejected: dict[int, list[str]] = {}  # row -> its rejected fields, in ROW_FIELDS order
    dropped: set[int] = set()  # rows whose step index or step time is out of range: the hub drops them
    if "step" not in columns or "step_time_s" not in columns:
        raise ProtocolError("'step' and 'step_time_s' are required")
    for name in [name for name in ROW_FIELDS if name in columns]:
        column = columns[name]
        kind = type(column)
        if (kind is float or kind is int) and name in _PLAIN_RANGES:  # the usual shared value, in one test
            low, high = _PLAIN_RANGES[name]
            if low <= column <= high:  # finite bounds: NaN and inf fail it
                shared[name] = float(column)
                continue
        one = kind is not list
        if one:
            column = [column]
        elif len(column) != n:
            raise ProtocolError(f"column '{name}' holds {len(column)} values, not n = {n}")
        checked, bad = _checked(name, column)
        for row in (range(n) if one and bad else bad):
            rejected.setdefault(row, []).append(name)
            if name in ("step", "step_time_s"):
                dropped.add(row)
        if one:
            shared[name] = checked[0]
        else:
            names.append(name)
            values.append(checked)
    return _rows(n, shared, names, values, rejected, dropped)


def _rows(n: int, shared: dict[str, Any], names: list[str], values: list[list[Any]],
          rejected: dict[int, list[str]], dropped: set[int]) -> list[dict[str, Any]]:
    if not rejected:  # the usual frame: no value out of range
        # a column at a time into the copies, not a zip and an update a row: half the cost (session 10)
        steps = [shared.copy() for _ in range(n)]
        for name, column in zip(names, values, strict=True):
            for step, value in zip(steps, column, strict=True):
                step[name] = value
        for step in steps:
            step["rejected"] = []
        return steps
    rows = zip(*values, strict=True) if values else ((),) * n
    steps = []
    for index, row in enumerate(rows):
        step = shared.copy()
        step.update(zip(names, row, strict=True))
        step["rejected"] = rejected.get(index, [])
        if index in dropped:
            step["step_time_s"] = None  # a step that cannot be placed, or timed, is dropped whole
        steps.append(step)
    return steps


def _checked(name: str, column: list[Any]) -> tuple[list[Any], list[int]]:
    """(the column's values as parse_step keeps them, the rows whose value is out of range)."""
    if name == "amp_dtype":
        try:
            if set(column) <= _DTYPES:
                return column, []
        except TypeError:  # an unhashable value: the one-by-one check below says what it is
            pass
        bad = [row for row, value in enumerate(column) if value is not None and value not in AMP_DTYPES]
        return [None if row in bad else value for row, value in enumerate(column)], bad
    if name == "step":
        low, high = 0, MAX_STEP_INDEX
        if set(map(type, column)) == {int} and low <= min(column) and max(column) <= high:
            return column, []
        indices = [integer({name: value}, name, required=True) for value in column]
        return indices, [row for row, value in enumerate(indices) if not low <= value <= high]  # type: ignore[operator]
    low, high = STEP_TIME_RANGE_S if name == "step_time_s" else STEP_RANGES[name]
    kinds = set(map(type, column))
    if kinds <= _NUMBERS:
        present = column if type(None) not in kinds else [value for value in column if value is not None]
        # min and max find a value out of range or infinite; a NaN (which compares false) makes the sum NaN
        if not present or (low <= min(present) and max(present) <= high and math.isfinite(sum(present))):
            if int in kinds:
                column = [value if value is None else float(value) for value in column]
            if name == "step_time_s" and len(present) < len(column):
                raise ProtocolError("'step_time_s' is missing")
            return column, []
    return _one_by_one(name, column, low, high)


def _one_by_one(name: str, column: list[Any], low: float, high: float) -> tuple[list[Any], list[int]]:
    """parse_step's check of this field, row by row."""
    required = name == "step_time_s"
    kept, bad = [], []
    for row, value in enumerate(column):
        value = number({name: value}, name, required=required)
        if value is not None and not low <= value <= high:
            bad.append(row)
            value = None if not required else value
        kept.append(value)
    return kept, bad
