"""A copying step's calls (agent/lazy.py LazyScalar on a CUDA value): each op call may hand the GIL to
another thread, so the copy makes only those it needs. No GPU here: a CPU tensor whose is_cuda says True,
a host buffer that is not pinned and an event that only counts its records stand in."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gpumix.agent.lazy import LazyScalar, PinnedPool


class _CudaValue(torch.Tensor):
    """Says it is on the GPU; counts its detach() calls."""

    detached = 0

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    def detach(self) -> torch.Tensor:  # type: ignore[override]
        _CudaValue.detached += 1
        return super().detach()


class _HostPool(PinnedPool):
    """Plain host buffers instead of pinned ones."""

    def take(self, torch_module: Any) -> torch.Tensor:
        self.taken += 1
        return torch.empty(())


class _Event:
    records = 0

    def record(self) -> None:
        _Event.records += 1

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


@pytest.fixture(autouse=True)
def _counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    _CudaValue.detached = _Event.records = 0


def cuda_value(value: float, requires_grad: bool) -> torch.Tensor:
    return torch.Tensor._make_subclass(_CudaValue, torch.tensor(value), requires_grad)


def test_a_value_that_needs_no_grad_is_copied_without_a_detach() -> None:
    """The GradScaler's scale, a loss given as loss.detach(): no detach (the old copy made one each)."""
    lazy = LazyScalar(cuda_value(1024.0, requires_grad=False), _HostPool())
    assert _CudaValue.detached == 0 and _Event.records == 1
    assert lazy.read() == 1024.0


def test_a_value_autograd_tracks_is_detached_and_the_buffer_keeps_no_graph() -> None:
    lazy = LazyScalar(cuda_value(2.5, requires_grad=True), _HostPool())
    assert _CudaValue.detached == 1 and _Event.records == 1
    assert lazy._host.grad_fn is None and not lazy._host.requires_grad
    assert lazy.read() == 2.5


class _Scaler:
    """GradScaler's surface the agent reads: its scale tensor (on the GPU: a stand-in here)."""

    def __init__(self, scale: torch.Tensor) -> None:
        self._scale = scale

    def is_enabled(self) -> bool:
        return True

    def get_backoff_factor(self) -> float:
        return 0.5


def test_a_steps_copies_share_one_event_recorded_after_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """A due step with a CUDA loss and a CUDA loss scale: two copies, one event (the old copy: two)."""
    from gpumix.agent.core import Agent

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    agent = Agent("/nonexistent/gpumix-hub.sock", job="one-event")
    agent._pinned = _HostPool()
    agent.watch_amp(_Scaler(cuda_value(4096.0, requires_grad=False)), torch.float16)
    try:
        with agent.step(samples=8) as step:  # the first step is due
            step.loss = cuda_value(3.0, requires_grad=True)
        assert _Event.records == 1 and step.loss._event is step.loss_scale._event is not None
        assert agent._pinned.step_copies is None  # the next copies (annotate_last's) record their own
        agent.annotate_last(loss=cuda_value(3.5, requires_grad=True))
        assert _Event.records == 2 and step.loss._event is not step.loss_scale._event
        (message,) = agent._collect(final=True)
    finally:
        agent.close(0.1)
    assert message["loss"] == 3.5 and message["loss_scale"] == 4096.0 and agent.sampling.copies == 2
