"""The agent's send period (agent/sender.py): 1 s by default, aligned across processes, overridden by
GPUMIX_AGENT_SEND_PERIOD_S; fewer writes reach the hub, the last steps still arrive at close, fast steps
wake the sender early rather than being dropped, and an agent sending every 0.1 s still works."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

import pytest

from gpumix.agent import sender as sender_module
from gpumix.agent.core import Agent
from gpumix.hub import Hub
from tests.waiting import step_work, wait_until


@pytest.fixture(autouse=True)
def _single_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "GPUMIX_CONTROL_DIR"):
        monkeypatch.delenv(name, raising=False)


def counted_reads(hub: Hub) -> list[int]:
    """One entry per read the hub handled from an agent (Hub.agent_steps is called once a read): its steps."""
    reads: list[int] = []
    inner = hub.agent_steps

    def counting(key: Any, steps: list[dict[str, Any]]) -> None:
        reads.append(len(steps))
        inner(key, steps)

    hub.agent_steps = counting  # type: ignore[method-assign]
    return reads


def hub_step(hub: Hub, job: str) -> int | None:
    ranks = [r for r in (hub.snapshot() or {}).get("ranks", []) if r.get("job") == job]
    return ranks[0].get("step") if ranks else None


# -- the period and its override ----------------------------------------------------------------


def test_the_default_period_is_the_hubs_tick_supervised_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUMIX_AGENT_SEND_PERIOD_S")  # the suite's agents send every 0.1 s (conftest.py)
    agent = Agent("/nonexistent/gpumix-hub.sock", job="default")
    agent.close(0.1)
    assert agent.sender.period_s == 1.0
    assert sender_module.send_period_s({}) == 1.0
    # under gpumix run too: its restarts allow for the period when they pick the stop step
    assert sender_module.send_period_s({"GPUMIX_CONTROL_DIR": "/tmp/run"}) == 1.0
    assert sender_module.send_period_s({"GPUMIX_AGENT_SEND_PERIOD_S": " 0.25 "}) == 0.25
    assert sender_module.send_period_s({"GPUMIX_AGENT_SEND_PERIOD_S": "2", "GPUMIX_CONTROL_DIR": "/tmp/run"}) == 2.0


@pytest.mark.parametrize("raw", ["fast", "0", "-1", "nan", "inf", "1e-320", "11", "\x1b[31m0.5"])
def test_a_bad_period_is_refused_in_one_line_and_the_default_kept(raw: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gpumix.agent"):
        assert sender_module.send_period_s({"GPUMIX_AGENT_SEND_PERIOD_S": raw}) == sender_module.PERIOD_S
    (record,) = caplog.records
    assert "GPUMIX_AGENT_SEND_PERIOD_S" in record.getMessage() and "\n" not in record.getMessage()
    assert "\x1b" not in record.getMessage()  # the value is shown as data (repr), never as an escape


def test_sends_are_on_one_grid_for_every_process() -> None:
    rng = random.Random(13)
    for _ in range(2000):
        period = rng.choice([0.01, 0.1, 0.5, 1.0, 3.7, 10.0])
        now = rng.uniform(0, 1e6)
        due = sender_module.next_send_s(now, period)
        lead = min(sender_module.ALIGN_LEAD_S, period / 4)
        assert now < due <= now + period + 1e-6
        assert abs((due + lead) / period - round((due + lead) / period)) < 1e-6  # a lead before a multiple
        # another process looking at any moment before that send sends at the same moment
        other = rng.uniform(due - period + 1e-6 * period, due - 1e-6 * period)
        assert sender_module.next_send_s(other, period) == pytest.approx(due, abs=1e-9 * max(1.0, due))


def test_an_agent_with_a_bad_override_warns_once_and_still_sends(
        hub_socket: tuple[Hub, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    hub, path = hub_socket
    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", "soon")
    with caplog.at_level(logging.WARNING, logger="gpumix.agent"):
        agent = Agent(path, job="bad-period")
    try:
        assert agent.sender.period_s == sender_module.PERIOD_S
        for _ in range(3):
            with agent.step(samples=8):
                step_work()  # the hub keeps every step: step 2 must arrive
    finally:
        agent.close()
    assert wait_until(lambda: hub_step(hub, "bad-period") == 2, 10)
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1


# -- what reaches the hub ---------------------------------------------------------------------


def run_steps(agent: Agent, steps: int, step_s: float) -> float:
    started = time.monotonic()
    for _ in range(steps):
        with agent.step(samples=8) as step:
            time.sleep(step_s)
            step.loss = 1.0
    return time.monotonic() - started


def stepped_until(agent: Agent, done: Callable[[], bool], timeout_s: float, step_s: float = 0.01) -> int:
    """Steps taken, one at a time, until `done` (checked after each) or `timeout_s` passed."""
    deadline, taken = time.monotonic() + timeout_s, 0
    while time.monotonic() < deadline:
        run_steps(agent, 1, step_s)
        taken += 1
        if done():
            break
    return taken


def test_steps_reach_the_hub_once_a_period_not_ten_times_a_second(
        hub_socket: tuple[Hub, str], monkeypatch: pytest.MonkeyPatch) -> None:
    hub, path = hub_socket
    reads = counted_reads(hub)
    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", "0.5")
    agent = Agent(path, job="period")
    try:
        seconds = run_steps(agent, 120, 0.02)  # 50 steps a second for about 2.5 s
        assert wait_until(lambda: hub_step(hub, "period") is not None and hub_step(hub, "period") >= 110, 10)
        writes_while_running = len(reads)
    finally:
        agent.close()
    assert agent.dropped == 0 and wait_until(lambda: hub_step(hub, "period") == 119, 10)
    # one write a period (and the first after the hello); every 0.1 s it was about 25
    assert writes_while_running <= seconds / 0.5 + 3, (writes_while_running, seconds)


def test_close_sends_the_last_steps_at_once_whatever_the_period(
        hub_socket: tuple[Hub, str], monkeypatch: pytest.MonkeyPatch) -> None:
    hub, path = hub_socket
    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", "10")
    agent = Agent(path, job="closing")
    run_steps(agent, 30, 0.001)
    agent.close(timeout_s=2.0)  # the sender joined within 2.5 s: it did not wait for its 10 s period
    assert not agent.sender._thread.is_alive()
    assert agent.sender.sent == 30 and agent.queued == 0 and agent.dropped == 0  # written before close returned
    assert wait_until(lambda: hub_step(hub, "closing") == 29, 10)


def test_steps_faster_than_the_ring_holds_over_a_period_wake_the_sender_early(
        hub_socket: tuple[Hub, str], monkeypatch: pytest.MonkeyPatch) -> None:
    hub, path = hub_socket
    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", "10")
    agent = Agent(path, job="fast")  # a ring of 1024 steps; these come at up to 1000 a second
    try:
        run_steps(agent, 2000, 0.001)
        assert agent.dropped == 0  # sent every ~512 steps, not once in 10 s with ~1000 overwritten
        assert wait_until(lambda: (hub_step(hub, "fast") or 0) >= 1500, 10)
    finally:
        agent.close()
    assert wait_until(lambda: hub_step(hub, "fast") == 1999, 10)


def test_a_sudden_run_of_fast_steps_after_slow_ones_is_sent_not_overwritten(
        hub_socket: tuple[Hub, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Slow first steps (a compile, an eval) then fast ones: the sender looks at the ring's count while it
    waits, so the fast run is sent as it fills half the ring (a rate learned from the slow steps slept
    through it, and the ring overwrote the oldest)."""
    hub, path = hub_socket
    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", "10")
    agent = Agent(path, job="ramp")
    try:
        run_steps(agent, 4, 0.3)
        # then up to 2000 a second: the ring's half fills in a quarter of a second, the sender looks every
        # tenth (faster than a sender can build messages is a limit of its own, not this test's)
        run_steps(agent, 3000, 0.0005)
        assert agent.dropped == 0
    finally:
        agent.close()
    assert wait_until(lambda: hub_step(hub, "ramp") == 3003, 20)


def test_an_agent_sending_every_tenth_of_a_second_still_works(hub_socket: tuple[Hub, str]) -> None:
    hub, path = hub_socket
    reads = counted_reads(hub)
    agent = Agent(path, job="old-style")
    agent.sender.period_s = 0.1  # as every agent before the 1 s default
    try:
        run_steps(agent, 40, 0.02)
        assert wait_until(lambda: (hub_step(hub, "old-style") or 0) >= 38, 10)
    finally:
        agent.close()
    assert wait_until(lambda: hub_step(hub, "old-style") == 39, 10) and len(reads) >= 3


@pytest.mark.parametrize(("period", "step_s"), [("1", 0.05), ("1", 0.4), ("10", 0.2), ("0.1", 0.01)])
def test_a_restart_stops_past_what_a_rank_can_run_before_it_reports(monkeypatch: pytest.MonkeyPatch,
                                                                   period: str, step_s: float) -> None:
    """gpumix run's stop step (gpumix/run/restart.py) allows for the ranks' send period: a rank may be a
    whole period (plus a step) ahead of its last report and must still see the request before the stop."""
    from gpumix.run import restart

    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", period)
    ranks = [{"step": 100, "step_time_s": step_s}, {"step": 98, "step_time_s": step_s / 2}]
    stop_after, wait_s = restart.stop_step(ranks)
    ahead_unreported = 1 + float(period) / step_s  # the step in flight, and a period of unsent steps
    seeing_the_request = restart.STOP_MARGIN_S / step_s
    assert stop_after - 100 >= ahead_unreported + seeing_the_request
    assert wait_s >= (stop_after - 100) * step_s  # the wait for the checkpoints covers the steps to the stop
