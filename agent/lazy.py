"""Read GPU values later, without a synchronisation now.

A loss tensor on the GPU is copied to pinned host memory with non_blocking
and an event recorded after it; one step later the event has long passed
and the value is read for free. If it has not (a very deep queue), the value
is skipped rather than waited for.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import Any

log = logging.getLogger("gpumix.agent")


class LazyScalar:
    __slots__ = ("_value", "_host", "_event", "_pool", "_ticket")

    def __init__(self, value: Any, pinned_pool: PinnedPool | None) -> None:
        self._value: float | None = None
        self._host = None
        self._event = None
        self._pool = pinned_pool
        self._ticket = 0
        if value is None:
            return
        if isinstance(value, int | float):
            self._value = float(value)
            return
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(value, torch.Tensor):
            self._value = float(value)
            return
        # detach only what autograd tracks: a tensor that needs no grad (the GradScaler's scale, a loss
        # given as loss.detach()) is copied as it is, one op call fewer (each may hand the GIL away)
        tensor = value.detach() if value.requires_grad else value
        if tensor.numel() != 1:
            tensor = tensor.float().mean()
        if not tensor.is_cuda or pinned_pool is None:  # is_cuda: device.type builds a torch.device
            self._value = float(tensor)  # CPU tensors: already computed
            return
        self._host = pinned_pool.take(torch)
        self._ticket = pinned_pool.taken
        if tensor.dtype != torch.float32 or tensor.dim() != 0:  # a usual loss is neither: no op calls for it
            tensor = tensor.float().reshape(())  # (each op call may hand the GIL to the sender thread)
        self._host.copy_(tensor, non_blocking=True)
        if pinned_pool.step_copies is not None:  # the agent records one event after the step's last copy
            pinned_pool.step_copies.append(self)
        else:
            self._event = recorded_event(torch)

    def after(self, event: Any) -> None:
        """Its copy is done once `event` (recorded after it, on the same stream) is."""
        self._event = event

    def _reused(self) -> bool:
        """Its pinned buffer may hold a later value by now (the ring went half round since)."""
        return self._pool is not None and self._pool.taken - self._ticket >= self._pool.size // 2

    def ready(self) -> bool:
        """The value can be read without waiting (or is lost: its buffer was reused)."""
        return self._event is None or self._reused() or bool(self._event.query())

    def read(self, wait: bool = False) -> float | None:
        """The value; None if the GPU has not computed it yet (unless wait: then wait for it), or if
        it was read too late (the sender thread fell behind: its pinned buffer went to later values)."""
        if self._value is not None or self._event is None:
            return self._value
        if self._reused():
            return None
        if wait:
            self._event.synchronize()
        elif not self._event.query():
            return None  # not done yet: skip rather than synchronise
        return float(self._host)


class PinnedPool:
    """A ring of pinned one-element host buffers: allocating pinned memory per step costs.

    A buffer is reused `size` takes later; a value not read within size // 2 takes reads None
    (LazyScalar._reused), never a later step's number. The sender thread reads each step's values
    within a send period (1 s) once computed, and a step's values are copied at most once a tenth of a
    second (agent/values.py): 512 small buffers cover 256 CUDA values, 20 a period at most."""

    def __init__(self, size: int = 512) -> None:
        self._buffers: list[Any] = []
        self.size = size
        self._next = 0
        self.taken = 0  # buffers handed out so far
        # while the training thread copies one step's values: the copies made, whose one event
        # record_step_event() records after the last (None: each copy records its own)
        self.step_copies: list[LazyScalar] | None = None

    def take(self, torch: Any) -> Any:
        self.taken += 1
        if len(self._buffers) < self.size:
            self._buffers.append(torch.empty((), dtype=torch.float32, pin_memory=True))
            return self._buffers[-1]
        buffer = self._buffers[self._next]
        self._next = (self._next + 1) % self.size
        return buffer


def recorded_event(torch: Any) -> Any:
    """A CUDA event recorded now on the current stream: done once the work queued before it is."""
    event = torch.cuda.Event()
    event.record()
    return event


def record_step_event(pool: PinnedPool) -> None:
    """One event for the copies of a step (a loss and a loss scale: one event and one record fewer than
    an event each, each call a chance to hand the GIL away); then copies record their own again.
    A copy left without an event (this raised) reads None, never a number not yet copied."""
    copies, pool.step_copies = pool.step_copies, None
    if copies:
        event = recorded_event(sys.modules["torch"])
        for copy in copies:
            copy.after(event)


def computed(values: Iterable[Any]) -> bool:
    """Every CUDA value among `values` is computed (a cheap event query each, no sync)."""
    return all(value.ready() for value in values if isinstance(value, LazyScalar))


def initialized_device() -> int | None:
    """The calling thread's current CUDA device, once CUDA is initialized (asking earlier would
    initialize it in a script that may not use the GPU)."""
    torch = sys.modules.get("torch")
    try:
        return torch.cuda.current_device() if torch is not None and torch.cuda.is_initialized() else None
    except Exception:
        return None


def use_device(index: int) -> bool:
    """On the sender thread, before its first CUDA call (an event query, the allocator's figures): a
    new thread's current device is 0, where a rank of another GPU would get a CUDA context of its own."""
    try:
        sys.modules["torch"].cuda.set_device(index)
    except Exception:
        log.warning("gpumix agent: the sender thread cannot use CUDA device %s", index, exc_info=True)
    return True  # once: a failure would fail again
