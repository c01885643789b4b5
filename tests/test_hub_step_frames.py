"""The columnar step frame (issue 13): the hub reads a frame as the per-step messages of its rows
(parse_steps against parse_step, on random and hostile frames), refuses a bad frame whole, and the
agent's encoder gives frames that read back as the messages it was given."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from gpumix.hub.ranks import STEP_RANGES, parse_step
from gpumix.hub.step_frames import ROW_FIELDS, parse_steps
from gpumix.wire import protocol
from gpumix.wire.protocol import ProtocolError
from gpumix.wire.step_columns import MAX_FRAME_STEPS, step_columns
from tests.test_hub_fast_paths import ODD_VALUES

NAMES = list(STEP_RANGES)


def rows_of(frame: dict[str, Any]) -> list[dict[str, Any]]:
    """Row i of a well-shaped frame as the step message it stands for."""
    columns = frame["columns"]
    return [{"type": "step", **{name: column[row] if isinstance(column, list) else column
                                for name, column in columns.items()}} for row in range(frame["n"])]


def outcome(parse: Any, *args: Any) -> Any:
    try:
        return parse(*args)
    except ProtocolError:
        return "refused"


def per_row(frame: dict[str, Any]) -> Any:
    """The reference: each row through parse_step; the frame is refused if any row is, or a column is a
    list of another length than n (a value every row shares is never a list)."""
    if any(isinstance(column, list) and len(column) != frame["n"] for column in frame["columns"].values()):
        return "refused"
    results = [outcome(parse_step, row) for row in rows_of(frame)]
    return "refused" if "refused" in results else results


def random_column(rng: random.Random, name: str, n: int) -> Any:
    good = {"step": lambda i: 100 + i, "step_time_s": lambda i: 0.1 + i / 1000, "amp_dtype": lambda i: "bfloat16"}
    usual = good.get(name, lambda i: rng.choice([0.5, 32, 1.0 + i, None]))
    roll = rng.random()
    if roll < 0.3:  # one value for every row
        return usual(0) if rng.random() < 0.85 else rng.choice(ODD_VALUES + ["float16", "fp3"])
    column = [usual(i) for i in range(n)]
    for _ in range(rng.choice([0, 0, 0, 0, 1, 2])):  # a few odd values among usual ones
        column[rng.randrange(n)] = rng.choice(ODD_VALUES + [2**54, -5, "float16", "fp3"])
    return column


def random_frame(rng: random.Random) -> dict[str, Any]:
    n = rng.randint(1, 12)
    names = ["step", "step_time_s"] + rng.sample(NAMES + ["amp_dtype"], rng.randint(0, 8))
    return {"type": "steps", "n": n, "columns": {name: random_column(rng, name, n) for name in names}}


def test_a_frame_reads_as_its_rows_read_one_by_one_on_random_and_hostile_frames() -> None:
    rng = random.Random(1313)
    refused = kept = rejected = 0
    for _ in range(4000):
        frame = random_frame(rng)
        # through the wire, NaN and infinities included (the hub's decoder takes them)
        body = json.dumps({"v": 1, **frame}).encode()
        message = protocol.decode(body, protocol.AGENT_TYPES)
        expected = per_row(json.loads(body))
        got = outcome(parse_steps, message)
        assert got == expected, (frame, got, expected)
        if got == "refused":
            refused += 1
        else:
            kept += 1
            rejected += sum(bool(step["rejected"]) for step in got)
    assert refused > 300 and kept > 1000 and rejected > 300, (refused, kept, rejected)  # every path was taken


@pytest.mark.parametrize("damage", [
    lambda f: f.update(n=0), lambda f: f.update(n=MAX_FRAME_STEPS + 1), lambda f: f.update(n=True),
    lambda f: f.update(n="3"), lambda f: f.update(n=2.0), lambda f: f.update(columns=[1, 2]),
    lambda f: f["columns"].pop("step"), lambda f: f["columns"].pop("step_time_s"),
    lambda f: f["columns"].update(loss=[1.0]),  # a column shorter than n
    lambda f: f["columns"].update(step=[1, 2, 3, 4]),  # longer
    lambda f: f["columns"].update(step_time_s=[0.1, None, 0.1]),  # a row without its step time
    lambda f: f["columns"].update(samples=[1, "x", 2]),
])
def test_a_bad_frame_is_refused_whole(damage: Any) -> None:
    frame = {"type": "steps", "n": 3, "columns": {"step": [1, 2, 3], "step_time_s": [0.1, 0.1, 0.1], "loss": 2.0}}
    assert len(parse_steps(frame)) == 3
    damage(frame)
    with pytest.raises(ProtocolError):
        parse_steps(frame)


def test_unknown_columns_are_ignored_as_unknown_fields_of_a_step_are() -> None:
    frame = {"type": "steps", "n": 2, "columns": {"step": [1, 2], "step_time_s": 0.1, "future": [[1], {}]}}
    assert parse_steps(frame) == [parse_step({"step": i, "step_time_s": 0.1, "future": 0}) for i in (1, 2)]


def agent_messages(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Step messages as an agent builds them: shared figures, a loss on some steps, a transport report
    never among them (the sender frames only runs of steps)."""
    messages = []
    for i in range(n):
        message: dict[str, Any] = {"type": "step", "step": 40 + i, "step_time_s": 0.05 + rng.random() / 100,
                                   "samples": 32, "micro_batch": 32, "dropped": 0, "rss_bytes": 1.5e9,
                                   "t": 1.8e9 + i / 10}
        if rng.random() < 0.3:
            message["loss"] = rng.choice([2.5, 3, 1e-3])
        if rng.random() < 0.2:
            message["amp_dtype"] = rng.choice(["bfloat16", "float16"])
        messages.append(message)
    return messages


def test_the_agent_s_frame_reads_back_as_the_messages_it_was_given() -> None:
    rng = random.Random(7)
    for n in (1, 2, 5, 64, MAX_FRAME_STEPS):
        messages = agent_messages(rng, n)
        frame = step_columns(messages)
        assert frame["n"] == n
        assert isinstance(frame["columns"]["samples"], int)  # a shared value goes once
        body = protocol.encode(frame)[protocol.HEADER.size:]
        steps = parse_steps(protocol.decode(body, protocol.AGENT_TYPES))
        assert steps == [parse_step(message) for message in messages]
        assert set(steps[0]) == {*ROW_FIELDS, "rejected"}


def test_a_frame_is_much_smaller_than_its_messages() -> None:
    messages = agent_messages(random.Random(3), 10)
    one_by_one = sum(len(protocol.encode(message)) for message in messages)
    assert len(protocol.encode(step_columns(messages))) < 0.6 * one_by_one
