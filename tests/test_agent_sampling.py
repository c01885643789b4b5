"""Which steps copy their CUDA values (agent/sampling.py): the first, then at most one each
DEVICE_READ_INTERVAL_S, always the one after a pause; the others leave them out, queue nothing on
the GPU and keep no tensor. No GPU here: a stand-in 'CUDA loss' is copied by a stand-in coerce into
a LazyScalar whose event is done. Whether a step ever synchronises cannot be seen without a GPU:
benchmarks/agent_cuda_check.py checks that on one, under torch's sync debug mode "error"."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from gpumix.agent import core
from gpumix.agent.amp import AmpWatch
from gpumix.agent.core import Agent
from gpumix.agent.lazy import LazyScalar
from gpumix.agent.sampling import DEVICE_READ_INTERVAL_S, DeviceSampling, copy_interval_s
from gpumix.wire.send_period import PERIOD_S
from tests.waiting import wait_until

ABSENT = "/nonexistent/gpumix-hub.sock"  # no hub: the sender never collects, the test does


def test_the_first_step_is_due_then_at_most_one_each_interval() -> None:
    sampling = DeviceSampling(interval_s=0.125)  # binary fractions: the fake clock adds up exactly
    clock_s = 1000.0
    due = []
    for _ in range(25):  # steps of 1/64 s: one copy each eighth of a second
        due.append(sampling.due(clock_s))
        if due[-1]:
            sampling.copied(clock_s)
        clock_s += 1 / 64
    assert [index for index, is_due in enumerate(due) if is_due] == [0, 8, 16, 24]
    assert sampling.copies == 4
    # the default: COPIES_PER_SEND a default send period (tests/test_agent_copy_interval.py: the agent's own)
    assert DEVICE_READ_INTERVAL_S == copy_interval_s(PERIOD_S) and DeviceSampling().interval_s == DEVICE_READ_INTERVAL_S


def test_the_step_after_a_pause_is_due_and_a_due_step_without_a_copy_keeps_it_due() -> None:
    sampling = DeviceSampling(interval_s=0.1)
    sampling.copied(5.0)
    assert not sampling.due(5.001) and not sampling.due(5.099)
    assert sampling.due(7.5)  # after an evaluation, a checkpoint, a stalled loader: at once
    # a due step that had no CUDA value (a CPU loss, none set) copied nothing: the next is still due
    assert sampling.due(7.51) and sampling.copies == 1
    sampling.copied(7.51)
    assert not sampling.due(7.52) and sampling.copies == 2


class _GpuLoss:
    """Stands for a CUDA loss tensor (no GPU here)."""

    def __init__(self, value: float) -> None:
        self.value = value


class _DoneEvent:
    """A CUDA event that has passed."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class _ScriptedSampling(DeviceSampling):
    """The rule's answers per step, in step order (the rule itself: the tests above, on a fake clock). The
    agent reads next_s once a step (the rule as one comparison): it answers per step from the script."""

    def __init__(self, due_steps: set[int]) -> None:
        super().__init__()
        self.due_steps = due_steps
        self.asked = 0

    @property  # type: ignore[override]
    def next_s(self) -> float:
        self.asked += 1
        return float("-inf") if self.asked - 1 in self.due_steps else float("inf")

    @next_s.setter
    def next_s(self, end_s: float) -> None:
        pass  # the script decides


@pytest.fixture()
def gpu_copies(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """_GpuLoss is a CUDA value to the agent; each copy it queues is noted (its value)."""
    copies: list[float] = []
    original = core.coerce

    def coerce(value: Any, pinned: Any, average: bool = False) -> Any:
        if isinstance(value, _GpuLoss):
            copies.append(value.value)
            lazy = LazyScalar(None, None)
            lazy._host, lazy._event = value.value, _DoneEvent()  # as if copied to pinned memory
            return lazy
        return original(value, pinned, average)

    monkeypatch.setattr(core, "coerce", coerce)
    monkeypatch.setattr(core, "on_gpu", lambda value: isinstance(value, _GpuLoss))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    return copies


def test_only_due_steps_copy_the_others_send_their_cpu_numbers_and_keep_no_tensor(gpu_copies: list[float]) -> None:
    agent = Agent(ABSENT, job="sampled")
    agent.sampling = _ScriptedSampling({0, 4})
    try:
        left = []
        for index in range(6):
            loss = _GpuLoss(float(index))
            left.append(weakref.ref(loss))
            with agent.step(samples=8) as step:
                step.loss, step.lr = loss, 0.5 * index
            del loss
        gc.collect()
        messages = agent._collect(final=True)
    finally:
        agent.close(0.1)
    assert gpu_copies == [0.0, 4.0] and agent.sampling.copies == 2
    assert [m.get("loss") for m in messages] == [0.0, None, None, None, 4.0, None]
    assert [m["lr"] for m in messages] == [0.5 * index for index in range(6)]  # CPU values: every step
    assert all(ref() is None for ref in left)  # no step keeps its tensor (and with it the graph)


def test_annotate_last_copies_only_on_a_due_step(gpu_copies: list[float]) -> None:
    agent = Agent(ABSENT, job="annotated")
    agent.sampling = _ScriptedSampling({0})
    try:
        for index in range(3):  # a framework that logs after the step (the HF Trainer's way)
            with agent.step(samples=8):
                pass
            agent.annotate_last(loss=_GpuLoss(float(index)), lr=1e-3)
        messages = agent._collect(final=True)
    finally:
        agent.close(0.1)
    assert gpu_copies == [0.0] and agent.sampling.copies == 1
    assert [m.get("loss") for m in messages] == [0.0, None, None] and all(m["lr"] == 1e-3 for m in messages)


def test_the_hub_receives_the_sampled_losses_and_every_step(hub_socket, gpu_copies: list[float]) -> None:
    hub, socket_path = hub_socket
    agent = Agent(socket_path, job="sampled-hub")
    agent.sampling = _ScriptedSampling({0, 7, 8, 19})
    try:
        for index in range(20):
            with agent.step(samples=8) as step:
                step.loss = _GpuLoss(float(index))
    finally:
        agent.close(5.0)
    rows = lambda: [r for r in hub.snapshot()["ranks"] if r["job"] == "sampled-hub"]  # noqa: E731
    assert wait_until(lambda: [r["step"] for r in rows()] == [19], 30), rows()
    assert rows()[0]["loss_history"] == [0.0, 7.0, 8.0, 19.0] and gpu_copies == [0.0, 7.0, 8.0, 19.0]


class _Scaler:
    """GradScaler's surface AmpWatch reads: its back-off factor (a Python float: no sync)."""

    def get_backoff_factor(self) -> float:
        return 0.5


def test_a_sampled_scale_counts_each_back_off_between_two_samples() -> None:
    watch = AmpWatch(_Scaler(), "float16")
    fields = [watch.fields(scale) for scale in (65536.0, None, 16384.0, 16384.0, 32768.0, 4096.0, None)]
    assert [f["amp_skipped_steps"] for f in fields] == [0, 0, 2, 2, 2, 5, 5]  # two halvings between samples, growth, three
    # a step whose scale was not sampled carries the scale in force (the rank row and the collapse finding read it)
    assert [f["loss_scale"] for f in fields] == [65536.0, 65536.0, 16384.0, 16384.0, 32768.0, 4096.0, 4096.0]
    assert "loss_scale" not in AmpWatch(_Scaler(), "float16").fields(None)  # none read yet: none sent
    no_factor = AmpWatch(object(), "float16")  # a scaler without the getter: one step per drop
    assert [no_factor.fields(scale)["amp_skipped_steps"] for scale in (8.0, 2.0)] == [0, 1]
