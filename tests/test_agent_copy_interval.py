"""How often the agent copies CUDA values, and what a step not due to copy costs (issue 13).

The copies follow the send period (agent/sampling.py: COPIES_PER_SEND a period, at most one each
MIN_INTERVAL_S): two a second at the default period of 1 s, not ten. A step with a CUDA loss that is
not due leaves it out without a copy, a coercion or a Python call it does not need. No GPU here: the
'CUDA loss' is a real torch tensor whose is_cuda says True (the agent's own check), and its copy on a
due step is a stand-in coerce's LazyScalar whose event is done."""

from __future__ import annotations

import cProfile
import pstats
import time
from typing import Any

import pytest
import torch

from gpumix.agent import core
from gpumix.agent.core import Agent
from gpumix.agent.lazy import LazyScalar
from gpumix.agent.sampling import COPIES_PER_SEND, MIN_INTERVAL_S, copy_interval_s
from gpumix.agent.step_record import StepRecord

ABSENT = "/nonexistent/gpumix-hub.sock"  # no hub: the sender never collects, the test does


class _CudaLoss(torch.Tensor):
    """A 0-d tensor the agent takes for a CUDA one: is_cuda is what it asks."""

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True


def cuda_loss(value: float) -> torch.Tensor:
    return torch.Tensor._make_subclass(_CudaLoss, torch.tensor(value), True)


class _DoneEvent:
    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


@pytest.fixture()
def copies(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Each CUDA copy the agent queues (through coerce), by value; single rank, no CUDA devices named."""
    made: list[float] = []

    def coerce(value: Any, pinned: Any, average: bool = False) -> Any:
        assert isinstance(value, _CudaLoss), "only the CUDA loss is coerced here"
        made.append(float(value.detach().as_subclass(torch.Tensor)))
        lazy = LazyScalar(None, None)
        lazy._host, lazy._event = made[-1], _DoneEvent()  # as if copied to pinned memory
        return lazy

    monkeypatch.setattr(core, "coerce", coerce)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    return made


def test_the_copy_interval_follows_the_send_period(monkeypatch: pytest.MonkeyPatch) -> None:
    assert COPIES_PER_SEND == 2
    assert copy_interval_s(1.0) == 0.5 and copy_interval_s(4.0) == 2.0
    assert copy_interval_s(0.1) == MIN_INTERVAL_S == copy_interval_s(0.01)  # never more than ten a second
    for period, interval in (("1", 0.5), ("4", 2.0), ("0.1", 0.1), ("", 0.5)):
        monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", period)
        agent = Agent(ABSENT, job="interval")
        try:
            assert agent.sender.period_s == (float(period) if period else 1.0)
            assert agent.sampling.interval_s == interval
        finally:
            agent.close(0.1)


def test_two_copies_a_send_period_at_the_default_period(monkeypatch: pytest.MonkeyPatch, copies: list[float]) -> None:
    """3 s of 1 ms steps with a CUDA loss each, on a fake clock: 6 copies (the old rule made 30)."""
    monkeypatch.delenv("GPUMIX_AGENT_SEND_PERIOD_S")  # the default period, 1 s
    clock = [1000.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    agent = Agent(ABSENT, job="per-send")
    try:
        for index in range(3000):
            with agent.step(samples=8) as step:
                step.loss = cuda_loss(float(index))
            clock[0] += 1 / 1024  # binary fractions: the fake clock adds up exactly
        messages = agent._collect(final=True)
    finally:
        agent.close(0.1)
    copied = [m["step"] for m in messages if "loss" in m]
    assert len(messages) == 1024  # the ring's last 1024 steps
    assert agent.sampling.copies == len(copies) == 6  # at 0, 0.5, ..., 2.5 s
    assert copied == [index for index in range(3000 - 1024, 3000) if index % 512 == 0]
    assert [m["loss"] for m in messages if "loss" in m] == [float(index) for index in copied]


def test_a_step_not_due_leaves_its_cuda_loss_out_and_queues_nothing(copies: list[float]) -> None:
    agent = Agent(ABSENT, job="not-due")
    agent.sampling.interval_s = 1e9  # the first step copies, none after it
    try:
        for index in range(4):
            with agent.step(samples=8) as step:
                step.loss, step.lr = cuda_loss(float(index)), 0.25
        messages = agent._collect(final=True)
    finally:
        agent.close(0.1)
    assert copies == [0.0] and [m.get("loss") for m in messages] == [0.0, None, None, None]
    assert all(m["lr"] == 0.25 for m in messages)


def test_a_step_not_due_makes_few_python_calls(copies: list[float]) -> None:
    """The training thread's path for a CUDA loss not due (~99 steps in 100 at 1 ms steps), counted by
    cProfile: the step, its record, one due() and the ring's put, no coercion (28 calls a step before)."""
    agent = Agent(ABSENT, job="calls")
    agent.sampling.interval_s = 1e9
    loss = cuda_loss(1.0)
    try:
        with agent.step(samples=8) as step:  # the first step copies
            step.loss = loss
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(100):
            with agent.step(samples=8) as step:
                step.loss = loss
        profile.disable()
        assert isinstance(step, StepRecord) and step.loss is None and step.device_due is False
    finally:
        agent.close(0.1)
    stats = pstats.Stats(profile)
    calls_per_step = (stats.total_calls - 1) / 100  # type: ignore[attr-defined]
    # step, StepRecord.__init__, 2 perf_counter, __enter__, __exit__, step_end, due, sys.modules.get,
    # isinstance, the stand-in's is_cuda property (a real tensor's is C: not counted), dict.items, put
    assert calls_per_step <= 14, calls_per_step
    assert copies == [1.0]
