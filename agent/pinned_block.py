"""The pinned host buffers CUDA values are copied into, made in one allocation.

PinnedPool (agent/lazy.py) allocates its 512 one-element pinned buffers one at a time, on the
training thread, as the copies need them: with the copies sampled at most one each 0.1 s
(agent/sampling.py), every copy of the first 51 s of a run is also a pinned allocation
(cudaHostAlloc, a driver call that pins a page) on top of its copy and its event. PinnedBlock holds
the same buffers as views of one pinned tensor, allocated by the sender thread once the training
thread has initialized CUDA (agent/core.py swaps it in): the copies then allocate nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from gpumix.agent.lazy import PinnedPool

log = logging.getLogger("gpumix.agent")


class PinnedBlock(PinnedPool):
    """A PinnedPool whose `size` buffers (0-d float32 views) share one pinned allocation, made now."""

    def __init__(self, torch: Any, size: int = 512) -> None:
        super().__init__(size)
        block = torch.empty(size, dtype=torch.float32, pin_memory=True)
        self._buffers = list(block.unbind())  # full: take() hands them round, never allocates


def pinned_block(torch: Any, current: PinnedPool) -> PinnedPool:
    """A PinnedBlock of current's size; current where pinned memory cannot be had (warned once)."""
    try:
        return PinnedBlock(torch, current.size)
    except Exception:
        log.warning("gpumix agent: no pinned block for CUDA values; they are copied into buffers made one at"
                    " a time", exc_info=True)
        return current
