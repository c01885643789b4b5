"""A frame's steps made a column at a time into copies of the shared row (step_frames._rows, session 10, issue
13), not a zip and an update a row: the same steps as each row through parse_step, keys in the same order."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from gpumix.hub import step_frames
from gpumix.hub.step_frames import parse_steps
from gpumix.wire import protocol
from tests.test_hub_step_frames import per_row, random_frame


def test_steps_and_their_key_order_are_parse_step_s() -> None:
    rng = random.Random(1010)
    compared = 0
    for _ in range(3000):
        body = json.dumps({"v": 1, **random_frame(rng)}).encode()
        expected = per_row(json.loads(body))
        if expected == "refused":
            continue
        got = parse_steps(protocol.decode(body, protocol.AGENT_TYPES))
        assert got == expected
        assert [list(step) for step in got] == [list(step) for step in expected]
        assert len({id(step["rejected"]) for step in got}) == len(got)  # a list of its own each
        compared += 1
    assert compared > 1000


def test_a_usual_frame_s_rows_are_made_a_column_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 10
    frame = {"v": 1, "type": "steps", "n": n, "columns": {
        "step": list(range(n)), "step_time_s": [0.1 + i / 1000 for i in range(n)], "samples": 32.0,
        "t": [1e9 + i for i in range(n)], "data_wait_s": [0.001] * (n - 1) + [None]}}
    message = protocol.decode(json.dumps(frame).encode(), protocol.AGENT_TYPES)
    zips: list[int] = []

    def counting_zip(*iterables: Any, strict: bool = False) -> Any:
        zips.append(len(iterables))
        return zip(*iterables, strict=strict)

    monkeypatch.setattr(step_frames, "zip", counting_zip, raising=False)  # the module's name before the builtin
    steps = parse_steps(message)
    assert len(steps) == n and steps[3]["t"] == 1e9 + 3 and steps[9]["data_wait_s"] is None
    assert len(zips) <= 5  # the columns' pairing and one a varying column, none a row
