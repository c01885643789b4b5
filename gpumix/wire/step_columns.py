"""The columnar step frame: the steps an agent sends together, as columns of one message.

    {"v": 1, "type": "steps", "n": 3, "columns": {"step": [7, 8, 9], "step_time_s": [0.1, 0.1, 0.12],
     "loss": [null, 2.5, null], "samples": 32, ...}}

Each column is a StepMessage field (gpumix/wire/step_message.py, not "type"): a list of n values, null
where a step has none, or one value that every step of the frame shares (the settings, the allocator's
and the process's figures, read once per collection). Row i is the step message with those fields; the
hub reads the frame as those n messages (gpumix/hub/step_frames.py), but decodes one frame instead of n
and checks each column at once (issue 13: the decode and the per-field checks of every step were most of
the hub's CPU per step). A hub from before this frame answers "unknown message type 'steps'": the agent
then sends one message per step (agent/sender.py). Standard library only.
"""

from __future__ import annotations

from typing import Any

STEPS_TYPE = "steps"
MAX_FRAME_STEPS = 1024  # rows in one frame at most (the hub refuses more); also under the frame's byte limit
REFUSED_BY_OLD_HUB = b"unknown message type 'steps'"  # how a hub without the frame answers it


def step_columns(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The "steps" message for these step messages (in order, 1 to MAX_FRAME_STEPS of them)."""
    names: dict[str, None] = {}
    for message in messages:
        names.update(dict.fromkeys(message))
    names.pop("type", None)
    columns: dict[str, Any] = {}
    for name in names:
        value = one_or_column([message.get(name) for message in messages])
        if value is not None:  # a field no step has is left out, as a message leaves it out
            columns[name] = value
    return {"type": STEPS_TYPE, "n": len(messages), "columns": columns}


def frame_rows(frame: dict[str, Any]) -> list[dict[str, Any]]:
    """The step messages of a "steps" frame, in order (for a hub from before the frame): a column's value
    in its row, a shared value in every row, None left out as a message leaves it out."""
    rows: list[dict[str, Any]] = [{"type": "step"} for _ in range(frame["n"])]
    for name, column in frame["columns"].items():
        if type(column) is list:
            for row, value in zip(rows, column, strict=True):
                if value is not None:
                    row[name] = value
        elif column is not None:
            for row in rows:
                row[name] = column
    return rows


def frame_slice(frame: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    """Rows start to stop of a "steps" frame, as a frame (a shared value stays shared)."""
    columns = {name: column[start:stop] if type(column) is list else column
               for name, column in frame["columns"].items()}
    return {"type": STEPS_TYPE, "n": stop - start, "columns": columns}


def one_or_column(values: list[Any]) -> Any:
    """What a frame holds for these values of a field, one per row, in a few C calls rather than a Python
    loop per row: the value when every row holds the same plain one, of one type (None when no row holds
    any: the field is left out), else the list itself. A list is never shared."""
    kinds = set(map(type, values))
    # compared only as plain values: a tensor set on a record after its step ended compares as a tensor
    if len(kinds) == 1 and kinds <= _SHAREABLE and values.count(first := values[0]) == len(values):
        return first
    return values


_SHAREABLE = {int, float, str, bool, type(None)}
