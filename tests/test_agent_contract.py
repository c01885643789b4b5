"""The agent's step message comes from the step contract (gpumix/wire/snapshot_types.py), and is
built on the sender thread: the training thread only puts its step in a preallocated ring."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from gpumix.agent import core
from gpumix.agent.core import Agent
from gpumix.agent.step_ring import StepRing
from gpumix.hub.ranks import parse_step
from gpumix.wire.snapshot_types import STEP_NUMBER_RANGES, StepMessage
from gpumix.wire.step_columns import frame_rows
from tests.waiting import wait_until

ABSENT = "/nonexistent/gpumix-hub.sock"  # no hub: the sender never collects, the test does


@pytest.fixture(autouse=True)
def _single_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


def test_every_field_of_the_step_contract_has_exactly_one_source() -> None:
    sources = [*core.STEP_HEAD, *core.MEASURED, *core.SETTINGS, *core.AMP_FIELDS, *core.RECORD_NUMBERS]
    assert sorted(sources) == sorted(StepMessage.__annotations__)
    assert set(core.RECORD_NUMBERS) == {"samples", "tokens", "loss", "lr", "forward_s", "backward_s", "optimizer_s",
                                        "comm_s", "loss_scale", "micro_batch", "accumulation_steps"}


def test_a_number_added_to_the_contract_is_taken_from_the_record_and_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    extended = {**STEP_NUMBER_RANGES, "grad_norm": (0.0, 1e9)}
    assert core.record_numbers(extended) == (*core.RECORD_NUMBERS, "grad_norm")
    monkeypatch.setattr(core, "RECORD_NUMBERS", core.record_numbers(extended))
    agent = Agent(ABSENT, job="contract")
    try:
        with agent.step(samples=8) as step:
            step.grad_norm = np.float32(2.5)  # coerced like any number of the contract
        with agent.step(samples=8):
            pass
        (message,) = agent._collect()
    finally:
        agent.close(0.1)
    assert message["grad_norm"] == 2.5 and type(message["grad_norm"]) is float


def test_a_step_s_own_passes_win_over_the_agent_s_within_one_frame() -> None:
    """A stair probe's steps run other passes than the split's, all sent in one frame a second: each
    step carries its own micro-batch, the others the agent's (read once a send, it gave the whole frame
    the split's: a probe's points carried passes they never ran)."""
    agent = Agent(ABSENT, job="passes")
    try:
        agent.micro_batch, agent.accumulation_steps = 8, 1
        for own in (None, 5, 6, None, 12):
            with agent.step(samples=12) as step:
                if own is not None:
                    step.micro_batch = own
                    step.accumulation_steps = 12 // own
        frame = agent._collect_frame(final=True)
    finally:
        agent.close(0.1)
    rows = frame_rows(frame)
    assert [row["micro_batch"] for row in rows] == [8, 5, 6, 8, 12]
    assert [row["accumulation_steps"] for row in rows] == [1, 2, 2, 1, 1]


class _Scaler:
    """GradScaler's surface the agent reads (no GPU here): its scale, enabled."""

    _scale = 1024.0

    def is_enabled(self) -> bool:
        return True


def test_a_full_step_carries_every_field_of_the_contract_in_range() -> None:
    import torch

    agent = Agent(ABSENT, job="contract")
    try:
        agent.micro_batch, agent.accumulation_steps, agent.gradient_bytes = 8, 2, 4096
        agent.watch_amp(_Scaler(), torch.bfloat16)
        agent.watch_model(torch.nn.DataParallel(torch.nn.Linear(2, 2)))
        for index in range(3):
            with agent.step(samples=8, tokens=64) as step:
                step.loss, step.lr = torch.tensor(2.0 - index), 1e-3
                step.forward_s, step.backward_s, step.optimizer_s, step.comm_s = 0.01, 0.02, 0.003, 0.004
        messages = agent._collect(final=True)
    finally:
        agent.close(0.1)
    assert [m["step"] for m in messages] == [0, 1, 2]
    without_cuda = {"mem_allocated_bytes", "mem_reserved_bytes", "mem_peak_bytes"}  # the allocator's, on a GPU
    assert set(messages[-1]) == set(StepMessage.__annotations__) - without_cuda
    parsed = parse_step(messages[-1])
    assert parsed["rejected"] == [] and parsed["loss"] == 0.0 and parsed["amp_dtype"] == "bfloat16"


def test_the_ring_keeps_the_newest_and_counts_what_it_overwrote() -> None:
    ring = StepRing(4)
    for index in range(10):
        ring.put(index)
    assert ring.dropped == 6 and ring.pending == 4  # counted while nobody read
    taken = []
    while (item := ring.oldest(keep=1)) is not None:
        taken.append(item)
        ring.take()
    assert taken == [6, 7, 8] and ring.dropped == 6 and ring.pending == 1  # the newest stays
    ring.put(10)
    assert ring.oldest(keep=1) == 9 and ring.oldest(keep=2) is None


class _WriterMidPut(list):
    """A full ring's slots, where the writer's next put lands between the reader's reads: its slot stored
    before the first read, its count after the second (a put is a store, then an increment)."""

    def __init__(self, ring: StepRing) -> None:
        super().__init__(ring._slots)
        self.ring, self.reads = ring, 0

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        self.reads += 1
        if self.reads == 1:
            self.ring.begun = self.ring.written + 1
            list.__setitem__(self, self.ring.written % self.ring.size, "new")
        elif self.reads == 2:
            self.ring.written += 1
        return list.__getitem__(self, index)


@pytest.mark.parametrize("read", ["peek", "oldest"])
def test_a_full_ring_read_while_the_writer_overwrites_its_oldest_step(read: str) -> None:
    """The old check (by the count alone) let the reader take the new step in the oldest's place: sent
    twice, the oldest lost uncounted (review)."""
    ring = StepRing(4)
    for index in range(4):
        ring.put(index)
    ring._slots = _WriterMidPut(ring)
    first = ring.peek() if read == "peek" else [ring.oldest()]
    assert first == ([1, 2, 3, "new"] if read == "peek" else [1]) and ring.dropped == 1


def test_steps_are_built_into_messages_on_the_sender_thread(hub_socket, monkeypatch: pytest.MonkeyPatch) -> None:
    hub, socket_path = hub_socket
    built_on: set[str] = set()
    original = Agent._frame

    def noting(self: Agent, records: list[core.StepRecord], numbers: dict[str, list]) -> dict:
        built_on.add(threading.current_thread().name)
        return original(self, records, numbers)

    monkeypatch.setattr(Agent, "_frame", noting)
    agent = Agent(socket_path, job="threads")
    try:
        for index in range(20):
            with agent.step(samples=8) as step:
                step.loss = float(index)
        last_seen = lambda: [r["step"] for r in hub.snapshot()["ranks"] if r["job"] == "threads"]  # noqa: E731
        assert wait_until(lambda: last_seen() == [18], 30), last_seen()  # the newest waits for the next step
    finally:
        agent.close(2.0)
    assert wait_until(lambda: last_seen() == [19], 30), last_seen()  # close sends it
    assert built_on == {"gpumix-agent-sender"}


def test_a_rank_row_shows_each_last_step_field_as_the_agent_sent_it(demo_hub) -> None:
    from gpumix.hub.ranks import parse_hello
    from gpumix.wire.snapshot_types import AMP_DTYPES, RANK_LAST_STEP_FIELDS

    key = demo_hub.agent_hello(parse_hello({"rank": 0, "world_size": 1, "job": "rows", "pid": 4242}))
    numbers = {name: min(high, 2.0 + index) for index, (name, (_, high)) in enumerate(STEP_NUMBER_RANGES.items())}
    for step in range(3):  # the row's figures come from its latest step: different values each step
        message = {**{name: value + (0.0 if name == "amp_autocast" else step) for name, value in numbers.items()},
                   "type": "step", "step": step, "step_time_s": 0.1, "amp_dtype": AMP_DTYPES[step]}
        parsed = parse_step(message)
        assert parsed["rejected"] == []
        demo_hub.agent_step(key, parsed)
    (row,) = [r for r in demo_hub.snapshot()["ranks"] if r["job"] == "rows"]
    assert "loss" in RANK_LAST_STEP_FIELDS and "step_time_s" not in RANK_LAST_STEP_FIELDS
    assert {name: row[name] for name in RANK_LAST_STEP_FIELDS} == {name: message[name] for name in RANK_LAST_STEP_FIELDS}


def test_an_idle_agent_stays_closed_until_its_next_steps(hub_socket, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub closes an agent silent past its idle timeout; the newest step, which waits for the next
    one, is no reason to reconnect: only the next steps are."""
    from gpumix.agent import sender

    hub, socket_path = hub_socket
    monkeypatch.setattr(sender, "_closed_by_hub", lambda sock: b"")  # as if the hub closed it at each look
    agent = Agent(socket_path, job="idle")
    try:
        for _ in range(3):
            with agent.step(samples=8):
                pass
        assert wait_until(lambda: agent.sender.sent == 2, 30), agent.sender.sent
        connects = agent.sender.connects
        assert not wait_until(lambda: agent.sender.connects > connects, 1.0)  # idle: no reconnection
        with agent.step(samples=8):
            pass
        assert wait_until(lambda: agent.sender.connects == connects + 1 and agent.sender.sent == 3, 30)
    finally:
        agent.close(2.0)
