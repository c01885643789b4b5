"""Read GPU values later, without a synchronisation now.

A loss tensor on the GPU is copied to pinned host memory with non_blocking
and an event recorded after it; one step later the event has long passed
and the value is read for free. If it has not (a very deep queue), the value
is skipped rather than waited for.
"""

from __future__ import annotations

import sys
from typing import Any


class LazyScalar:
    __slots__ = ("_value", "_host", "_event")

    def __init__(self, value: Any, pinned_pool: PinnedPool | None) -> None:
        self._value: float | None = None
        self._host = None
        self._event = None
        if value is None:
            return
        if isinstance(value, int | float):
            self._value = float(value)
            return
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(value, torch.Tensor):
            self._value = float(value)
            return
        tensor = value.detach()
        if tensor.numel() != 1:
            tensor = tensor.float().mean()
        if tensor.device.type != "cuda" or pinned_pool is None:
            self._value = float(tensor)  # CPU tensors: already computed
            return
        self._host = pinned_pool.take(torch)
        self._host.copy_(tensor.float().reshape(()), non_blocking=True)
        self._event = torch.cuda.Event()
        self._event.record()

    def ready(self) -> bool:
        """The value can be read without waiting."""
        return self._event is None or bool(self._event.query())

    def read(self, wait: bool = False) -> float | None:
        """The value; None if the GPU has not computed it yet (unless wait: then wait for it)."""
        if self._value is not None or self._event is None:
            return self._value
        if wait:
            self._event.synchronize()
        elif not self._event.query():
            return None  # not done yet: skip rather than synchronise
        return float(self._host)


class PinnedPool:
    """A ring of pinned one-element host buffers: allocating pinned memory per step costs.

    A buffer is reused `size` takes later. Up to eight fields of a step may be CUDA tensors, and
    a step's record waits up to MAX_DEFERRED_STEPS (agent/core.py) for them: (6 + 2) * 8 = 64
    buffers may be in use; twice that is the ring."""

    def __init__(self, size: int = 128) -> None:
        self._buffers: list[Any] = []
        self._size = size
        self._next = 0

    def take(self, torch: Any) -> Any:
        if len(self._buffers) < self._size:
            self._buffers.append(torch.empty((), dtype=torch.float32, pin_memory=True))
            return self._buffers[-1]
        buffer = self._buffers[self._next]
        self._next = (self._next + 1) % self._size
        return buffer
