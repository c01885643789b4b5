"""The sampling thread's ticks leave the merge of the ranks to whoever asks (issue 13): a tick no client and
no listener reads merges nothing, and the next ask merges the newest reading with the ranks as of then.
A listener (the recorder) still gets each tick's merged snapshot, and a tick called for its result
(one-shots, a fresh snapshot, a control) still returns the merged one."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from gpumix.hub import Hub, core
from gpumix.hub.ranks import parse_hello, parse_step
from gpumix.hw.hardware import Hardware
from tests.conftest import FixedHostSampler, ManualClock, ticked_hub


@pytest.fixture
def merges(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per merge_ranks call the hub makes."""
    calls: list[int] = []
    real = core.merge_ranks

    def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(core, "merge_ranks", counted)
    return calls


def add_rank(hub: Hub, rank: int = 0) -> Any:
    uuid = hub.snapshot()["gpus"][rank]["uuid"]
    key = hub.agent_hello(parse_hello({"rank": rank, "world_size": 2, "job": "train", "pid": 7100 + rank,
                                       "gpu_uuid": uuid}))
    hub.agent_step(key, parse_step({"step": 0, "step_time_s": 0.5, "samples": 32}))
    return key


def test_an_unread_tick_merges_nothing_and_the_next_ask_merges_the_newest_reading(
        demo_hardware: Hardware, clock: ManualClock, merges: list[int]) -> None:
    hub = ticked_hub(demo_hardware, clock)
    key = add_rank(hub)
    merges.clear()
    for step in range(1, 4):
        clock.advance(1.0)
        hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.5, "samples": 32}))
        hardware_only = hub.tick(merge=False)
        assert hardware_only["ranks"] == []  # the reading alone, not merged
    assert merges == []
    snapshot = hub.snapshot()
    assert len(merges) == 1
    assert snapshot["timestamp_s"] == hardware_only["timestamp_s"]  # the newest reading, not an older merge
    assert [row["rank"] for row in snapshot["ranks"]] == [0]
    assert snapshot["ranks"][0]["step"] == 3  # the steps that came between the ticks
    assert hub.snapshot() is snapshot and len(merges) == 1  # nothing new since: the same merge


def test_a_listener_or_a_caller_that_reads_the_tick_gets_it_merged(
        demo_hardware: Hardware, clock: ManualClock, merges: list[int]) -> None:
    hub = ticked_hub(demo_hardware, clock)
    add_rank(hub)
    assert [row["rank"] for row in hub.tick()["ranks"]] == [0]  # a one-shot's tick
    heard: list[dict[str, Any]] = []
    hub.on_snapshot.append(heard.append)
    merges.clear()
    hub.tick(merge=False)
    assert len(merges) == 1 and [row["rank"] for row in heard[0]["ranks"]] == [0]


def test_the_sampling_thread_ticks_without_merging(demo_hardware: Hardware, merges: list[int]) -> None:
    hub = Hub(demo_hardware, interval_s=0.01, host_sampler=FixedHostSampler())
    hub.tick()
    merges.clear()
    hub.start()
    try:
        deadline = time.monotonic() + 30
        while hub.ticks < 4 and time.monotonic() < deadline:
            threading.Event().wait(0.01)
    finally:
        hub.stop()
    assert hub.ticks >= 4
    assert merges == []
    assert hub.snapshot() is not None and len(merges) == 1


def test_a_cap_control_shows_the_new_cap_at_the_next_ask_without_merging_for_itself(
        demo_hardware: Hardware, clock: ManualClock, merges: list[int]) -> None:
    hub = ticked_hub(demo_hardware, clock)
    add_rank(hub)
    hub.snapshot()
    merges.clear()
    reply = hub.control({"type": "power", "action": "caps", "caps": {"3": 280}})
    assert reply["ok"] and reply["changes"]
    asked_by_the_control = len(merges)  # the control reads the snapshot it checks the caps against
    snapshot = hub.snapshot()
    assert len(merges) == asked_by_the_control + 1  # its tick merged nothing; the ask merges the new reading
    assert {gpu["index"]: gpu["power_cap_w"] for gpu in snapshot["gpus"]}[3] == 280
    assert [row["rank"] for row in snapshot["ranks"]] == [0]
