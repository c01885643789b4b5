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
