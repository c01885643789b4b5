"""The pinned buffers for CUDA values in one allocation (agent/pinned_block.py), made by the sender
thread once CUDA is initialized, so that the training thread's sampled copies allocate nothing.
No GPU here: the block is made by a stand-in for torch whose `empty` makes a real CPU tensor (this
torch has no pinned allocator), counting its calls; the real torch's refusal is the fallback."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gpumix.agent import core
from gpumix.agent.core import Agent
from gpumix.agent.lazy import PinnedPool
from gpumix.agent.pinned_block import PinnedBlock, pinned_block
from tests.waiting import wait_until

ABSENT = "/nonexistent/gpumix-hub.sock"  # no hub: the sender never collects, the test does


class _TorchWithoutPinning:
    """torch's empty and float32, pin_memory dropped (a CPU-only build has no pinned allocator)."""

    float32 = torch.float32

    def __init__(self) -> None:
        self.allocations = 0

    def empty(self, *shape: Any, dtype: Any, pin_memory: bool) -> torch.Tensor:
        assert pin_memory
        self.allocations += 1
        return torch.empty(*shape, dtype=dtype)


def test_the_block_is_one_allocation_and_its_buffers_go_round_without_another() -> None:
    fake = _TorchWithoutPinning()
    pool = PinnedBlock(fake, size=8)
    taken = [pool.take(fake) for _ in range(20)]
    assert fake.allocations == 1 and pool.taken == 20
    assert all(buffer.shape == () and buffer.dtype == torch.float32 for buffer in taken)
    assert len({buffer.untyped_storage().data_ptr() for buffer in taken}) == 1  # views of the one block
    assert taken[8] is taken[0] and taken[19] is taken[3]  # handed round, as PinnedPool does
    taken[1].copy_(torch.tensor(2.5))
    assert float(taken[9]) == 2.5  # the same buffer: a value read after size takes is another step's


def test_without_a_pinned_allocator_the_pool_in_use_stays(caplog: pytest.LogCaptureFixture) -> None:
    current = PinnedPool(size=16)
    assert pinned_block(torch, current) is current  # this CPU-only torch refuses pin_memory
    assert "no pinned block" in caplog.text


@pytest.fixture(autouse=True)
def _single_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


def test_the_collecting_thread_swaps_the_block_in_once_cuda_is_initialized(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _TorchWithoutPinning()
    monkeypatch.setattr(core, "use_device", lambda index: True)  # no GPU to move the thread to
    monkeypatch.setattr(core, "pinned_block", lambda torch_module, current: pinned_block(fake, current))
    agent = Agent(ABSENT, job="block")
    try:
        before = agent._pinned
        for _ in range(3):
            with agent.step(samples=8) as step:
                step.loss = 1.0
        agent._collect()
        assert agent._pinned is before  # CUDA not initialized: nothing allocated
        agent._steps_device = 0  # as step_end notes once the training thread's CUDA is initialized
        agent._collect()
        assert isinstance(agent._pinned, PinnedBlock) and agent._pinned.size == before.size
        block = agent._pinned
        agent._collect()
        assert agent._pinned is block and fake.allocations == 1  # once
    finally:
        agent.close(0.1)


def test_without_a_hub_the_sender_swaps_the_block_in_all_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no hub the sender never collects; its wake-ups still swap the block in, so that a rank trained
    without the monitor does not pin a buffer at each copy (a cudaHostAlloc on the training thread)."""
    fake = _TorchWithoutPinning()
    monkeypatch.setattr(core, "use_device", lambda index: True)
    monkeypatch.setattr(core, "pinned_block", lambda torch_module, current: pinned_block(fake, current))
    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", "0.1")
    collects: list[bool] = []
    monkeypatch.setattr(Agent, "_collect_frames", lambda self, final=False, limit=None: collects.append(final) or [])
    agent = Agent(ABSENT, job="block")
    try:
        for _ in range(3):
            with agent.step(samples=8) as step:
                step.loss = 1.0
        agent._steps_device = 0  # as step_end notes once the training thread's CUDA is initialized
        assert wait_until(lambda: isinstance(agent._pinned, PinnedBlock), 10)
        assert fake.allocations == 1 and collects == []  # swapped in by a wake-up, not by a collect
    finally:
        agent.close(0.1)
