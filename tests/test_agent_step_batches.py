"""The agent builds a batch of steps as one columnar frame, column by column (issue 13: the sender held the
GIL through a message per step): the frame's rows are the messages the per-step builder made (kept here as
the reference), the hub reads them alike, the frame splits under the hub's limits, an old hub gets one
message per step, the send queue is bounded in steps, and the ring hands out a batch as oldest/take did."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import numpy as np
import pytest
import torch

from gpumix.agent import sender as sender_module
from gpumix.agent.core import RECORD_NUMBERS, Agent
from gpumix.agent.lazy import LazyScalar
from gpumix.agent.step_ring import StepRing
from gpumix.agent.values import read
from gpumix.hub.ranks import parse_step
from gpumix.hub.step_frames import parse_steps
from gpumix.wire import protocol
from gpumix.wire.step_columns import MAX_FRAME_STEPS, frame_rows, one_or_column

ABSENT = "/nonexistent/gpumix-hub.sock"  # no hub: the sender never collects, the test does


@pytest.fixture(autouse=True)
def _single_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


class _DoneEvent:
    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class _PendingEvent(_DoneEvent):
    def query(self) -> bool:
        return False


def lazy(value: float, done: bool = True) -> LazyScalar:
    """A CUDA value as copied to pinned memory (its event passed, or not yet)."""
    scalar = LazyScalar(None, None)
    scalar._host, scalar._event = value, _DoneEvent() if done else _PendingEvent()
    return scalar


class _Scaler:
    def __init__(self) -> None:
        self._scale = 65536.0

    def is_enabled(self) -> bool:
        return True


class _Figures:
    """Fixed process and allocator figures: the two builders read them at different moments."""

    def gpu_memory(self) -> dict[str, float]:
        return {"mem_allocated_bytes": 1e9, "mem_reserved_bytes": 2e9, "mem_peak_bytes": 1.5e9}

    def process(self) -> dict[str, float | None]:
        return {"cpu_pct": 99.0, "rss_bytes": 1e9}


def reference_message(agent: Agent, record: Any, wait: bool, shared: dict[str, Any]) -> dict[str, Any]:
    """The step's message as the agent built it per step before the columnar build (agent/core.py, ec78d05)."""
    for probe in agent.phase_probes:
        for name, value in probe().items():
            if name in RECORD_NUMBERS and getattr(record, name, None) is None:
                setattr(record, name, agent._number(name, value))
    message: dict[str, Any] = {"type": "step", "step": record.index, "step_time_s": record.step_time_s}
    for name in RECORD_NUMBERS:
        value = getattr(record, name)
        if record.device_due and value is not None:
            value = read(value, wait)
        if value is not None:
            message[name] = value
    if "comm_s" not in message and agent.comm_probes:
        comm_s = read(agent._number("comm_s", agent._comm_seconds(record.index)))
        if comm_s is not None:
            message["comm_s"] = comm_s
    message.update((name, value) for name, value in shared.items() if name not in message)  # a step's own passes win
    message["t"] = record.end_s + agent._wall_offset_s
    if record.data_wait_s is not None:
        message["data_wait_s"] = record.data_wait_s
    loss_scale = message.pop("loss_scale", None)
    if agent._amp is not None:
        message.update((key, value) for key, value in agent._amp.fields(loss_scale).items() if value is not None)
    return message


NAN = float("nan")


def random_value(rng: random.Random, name: str) -> Any:
    return rng.choice([None, 8, 8, 8, 2.5, 2.5, rng.random(), np.int64(8), np.float32(0.25), torch.tensor(3.0),
                       "eight", [1, 2], NAN, -1.0, True, 10**30])


@pytest.mark.parametrize("seed", range(12))
def test_the_frame_s_rows_are_the_per_step_messages_and_the_hub_reads_them_alike(seed: int) -> None:
    rng = random.Random(seed)
    agent = Agent(ABSENT, job="batches", max_messages=256)
    try:
        agent._figures = _Figures()
        if rng.random() < 0.5:
            agent.micro_batch, agent.gradient_bytes = 8, 4096
        scaler = _Scaler()
        if rng.random() < 0.6:
            agent.watch_amp(scaler, torch.float16)
        if rng.random() < 0.5:
            agent.phase_probes.append(lambda: {"forward_s": 0.01, "backward_s": None, "bogus": 1.0})
        if rng.random() < 0.5:
            agent.comm_probes.append(lambda index: None if index % 3 == 0 else index * 1e-4)
        steps = rng.randint(1, 120)
        names = rng.sample(RECORD_NUMBERS, rng.randint(0, len(RECORD_NUMBERS)))
        for _ in range(steps):
            if rng.random() < 0.1:  # a drop of the scale: a skipped step
                scaler._scale /= rng.choice([2.0, 4.0])
            with agent.step(samples=random_value(rng, "samples")) as step:
                for name in names:
                    if rng.random() < 0.8:
                        setattr(step, name, random_value(rng, name))
        records = agent._ring.peek(None, keep=0)
        for record in records:  # some steps due to copy, with CUDA values computed
            if rng.random() < 0.2:
                record.device_due = True
                record.__dict__["loss"] = lazy(rng.random())
        amp_state = (agent._amp.skipped, agent._amp._last_scale) if agent._amp else None
        frame = agent._collect_frame(final=True)
        assert frame is not None and frame["n"] == steps
        if agent._amp is not None:  # the reference counts the skipped steps from the same start
            agent._amp.skipped, agent._amp._last_scale = amp_state
        shared = agent._shared_fields()
        expected = [reference_message(agent, record, True, shared) for record in records]
    finally:
        agent.close(0.1)
    assert frame_rows(frame) == expected
    parsed = parse_steps(json.loads(protocol.encode(frame)[protocol.HEADER.size:]))
    # through the wire, as the hub gets them: a NaN goes as null (protocol.encode)
    by_step = [parse_step(json.loads(protocol.encode(message)[protocol.HEADER.size:])) for message in expected]
    assert json.dumps(parsed, default=str) == json.dumps(by_step, default=str)


def test_a_step_with_a_cuda_value_not_computed_holds_back_the_later_steps_within_the_window() -> None:
    agent = Agent(ABSENT, job="deferred")
    try:
        for index in range(10):
            with agent.step(samples=8) as step:
                step.loss = float(index)
        records = agent._ring.peek(None, keep=0)
        records[3].device_due = True
        records[3].__dict__["loss"] = lazy(7.0, done=False)
        assert [m["step"] for m in agent._collect()] == [0, 1, 2]  # 6 newer steps: it waits
        with agent.step(samples=8):
            pass  # a 7th newer step: the window passed, it goes without its loss
        rest = agent._collect()
    finally:
        agent.close(0.1)
    assert [m["step"] for m in rest] == list(range(3, 10)) and "loss" not in rest[0]
    assert [m["loss"] for m in rest[1:]] == [float(i) for i in range(4, 10)]


def test_a_frame_over_the_hub_s_limits_splits_and_a_frame_of_one_step_goes_as_its_message() -> None:
    rng = random.Random(3)
    rows = 3000
    frame = {"type": "steps", "n": rows, "columns": {"step": list(range(rows)), "samples": 8,
                                                   "loss": [rng.random() for _ in range(rows)]}}
    data = sender_module.frame_bytes(frame)
    frames, offset = [], 0
    while offset < len(data):
        (length,) = protocol.HEADER.unpack_from(data, offset)
        assert length <= protocol.MAX_AGENT_FRAME_BYTES
        frames.append(json.loads(data[offset + protocol.HEADER.size:offset + protocol.HEADER.size + length]))
        offset += protocol.HEADER.size + length
    assert len(frames) >= 3 and all(f["n"] <= MAX_FRAME_STEPS for f in frames)
    assert [row for f in frames for row in frame_rows(f)] == frame_rows(frame)
    one = {"type": "steps", "n": 1, "columns": {"step": [4], "step_time_s": 0.1, "loss": None}}
    assert json.loads(sender_module.frame_bytes(one)[protocol.HEADER.size:]) == {"v": 1, "type": "step", "step": 4,
                                                                               "step_time_s": 0.1}


def test_an_old_hub_gets_one_message_per_step_of_a_frame_in_order() -> None:
    frame = {"type": "steps", "n": 3, "columns": {"step": [1, 2, 3], "step_time_s": 0.1, "loss": [None, 2.0, 3.0]}}
    transport = {"type": "transport", "pairs": []}
    data = sender_module.encode_batch([frame, transport], columns=False)
    messages, offset = [], 0
    while offset < len(data):
        (length,) = protocol.HEADER.unpack_from(data, offset)
        messages.append(json.loads(data[offset + protocol.HEADER.size:offset + protocol.HEADER.size + length]))
        offset += protocol.HEADER.size + length
    assert [m["type"] for m in messages] == ["step", "step", "step", "transport"]
    assert [m["step"] for m in messages[:3]] == [1, 2, 3] and "loss" not in messages[0] and messages[2]["loss"] == 3.0


def test_the_send_queue_holds_at_most_its_steps_whatever_the_frames_and_counts_the_oldest_dropped() -> None:
    sender = sender_module.Sender(ABSENT, lambda: {"type": "hello"}, max_messages=100)
    try:
        frame = lambda n: {"type": "steps", "n": n, "columns": {"step": list(range(n))}}  # noqa: E731
        sender._enqueue(frame(60))
        sender._enqueue(frame(30))
        assert sender.queued == 90 and sender.dropped == 0
        sender._enqueue(frame(60))  # over 100: the oldest frame goes, its 60 steps counted
        assert sender.queued == 90 and sender.dropped == 60
        sender.put({"type": "transport"})
        assert sender.queued == 91
    finally:
        sender.close(0.1)


def test_the_ring_s_batch_is_what_oldest_and_take_gave_step_by_step_overwrites_included() -> None:
    rng = random.Random(5)
    batched, stepwise = StepRing(16), StepRing(16)
    for _ in range(400):
        for _ in range(rng.randint(0, 40)):  # the writer, sometimes a whole ring ahead
            value = rng.random()
            batched.put(value)
            stepwise.put(value)
        keep, limit = rng.randint(0, 2), rng.choice([None, 1, 5, 32])
        got = batched.peek(limit, keep)
        batched.take(len(got))
        expected = []
        while (limit is None or len(expected) < limit) and (item := stepwise.oldest(keep)) is not None:
            expected.append(item)
            stepwise.take()
        assert got == expected
        assert batched.dropped == stepwise.dropped and batched.pending == stepwise.pending


def test_a_shared_value_is_one_plain_value_of_one_type_and_a_tensor_never_raises() -> None:
    assert one_or_column([2.5, 2.5, 2.5]) == 2.5
    assert one_or_column([8, 8.0]) == [8, 8.0]  # one type only, as step_columns decides
    assert one_or_column([None, None]) is None
    assert one_or_column([[1], [1]]) == [[1], [1]]
    nan = float("nan")
    assert one_or_column([nan, nan]) is nan and math.isnan(one_or_column([nan, float("nan")])[1])
    tensors = [torch.ones(3), torch.ones(3)]  # set on a record after its step ended: sent as text, never compared
    assert one_or_column(tensors) is tensors
