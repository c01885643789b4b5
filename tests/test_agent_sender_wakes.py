"""The agent's sender wakes on a threshold, not on a clock (issue 13): with a live hub and steady steps it
wakes about once a send period (each wake-up takes the GIL from the training thread; it used to count the
ring ten times a second), and the ring wakes it once as its unsent steps reach half of it, so that a sudden
run of fast steps is still sent before it is overwritten."""

from __future__ import annotations

import time

import pytest

from gpumix.agent import sender as sender_module
from gpumix.agent.core import Agent
from gpumix.agent.step_ring import StepRing
from gpumix.hub import Hub
from tests.waiting import step_work, wait_until


@pytest.fixture(autouse=True)
def _single_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "GPUMIX_CONTROL_DIR"):
        monkeypatch.delenv(name, raising=False)


def hub_step(hub: Hub, job: str) -> int | None:
    ranks = [r for r in (hub.snapshot() or {}).get("ranks", []) if r.get("job") == job]
    return ranks[0].get("step") if ranks else None


def test_the_ring_wakes_its_reader_once_per_crossing_of_half_not_per_step() -> None:
    ring = StepRing(8)
    for index in range(3):
        ring.put(index)
    assert not ring.half_full.is_set()  # 3 unsent of 8
    ring.put(3)
    assert ring.half_full.is_set()  # 4 unsent: half
    ring.half_full.clear()
    for index in range(4, 12):
        ring.put(index)  # above half, then overwriting: no new wake-up
    assert not ring.half_full.is_set()
    while ring.oldest() is not None:  # the reader comes back, takes everything
        ring.take()
    for index in range(12, 15):
        ring.put(index)
    assert not ring.half_full.is_set()
    ring.put(15)
    assert ring.half_full.is_set()  # the next crossing wakes it again


def test_with_a_live_hub_and_steady_steps_the_sender_wakes_once_a_period(
        hub_socket: tuple[Hub, str], monkeypatch: pytest.MonkeyPatch) -> None:
    hub, path = hub_socket
    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", "1")
    agent = Agent(path, job="wakes")
    wakes: list[float] = []
    inner = agent.sender._wait

    def counting(seconds: float) -> None:
        inner(seconds)
        wakes.append(time.monotonic())

    agent.sender._wait = counting  # type: ignore[method-assign]  # the sender thread looks it up each wait
    try:
        started = time.monotonic()
        for _ in range(50):  # 20 steps a second for 2.5 s: far from half the ring
            with agent.step(samples=8) as step:
                time.sleep(0.05)
                step.loss = 1.0
        seconds = time.monotonic() - started
        assert wait_until(lambda: (hub_step(hub, "wakes") or 0) >= 20, 10)
        woken = len([t for t in wakes if t <= started + seconds])
    finally:
        agent.close()
    assert agent.dropped == 0 and wait_until(lambda: hub_step(hub, "wakes") == 49, 10)
    # a send a period (and the first connect); counting the ring every 0.1 s woke it about 25 times
    assert woken <= seconds / 1.0 + 3, (woken, seconds)


def test_a_burst_after_quiet_steps_wakes_the_sender_before_the_ring_overwrites(
        hub_socket: tuple[Hub, str], monkeypatch: pytest.MonkeyPatch) -> None:
    hub, path = hub_socket
    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", "10")
    agent = Agent(path, job="burst", max_messages=64)  # half the ring: 32 steps
    try:
        # no aligned send within the next 3.5 s (the sends are at multiples of 10 s): only the wake-up sends
        due_s = sender_module.next_send_s(time.monotonic(), 10.0)
        if due_s - time.monotonic() < 3.5:
            time.sleep(due_s - time.monotonic() + 0.05)
        for _ in range(3):
            with agent.step(samples=8):
                time.sleep(0.2)
        for _ in range(40):  # crosses half, then waits: the sender must go now, not at its 10 s send
            with agent.step(samples=8):
                step_work()  # the hub keeps every step: step 42 must arrive
        assert wait_until(lambda: (hub_step(hub, "burst") or 0) >= 30, 2.5)  # long before the next send
        assert agent.dropped == 0
    finally:
        agent.close()
    assert wait_until(lambda: hub_step(hub, "burst") == 42, 10)
