"""What the sender thread adds to each step message from the process and the CUDA allocator.

Each is read at most once a second: a `torch.cuda.memory_*` call builds the allocator's whole
statistics dict (tens of µs), psutil reads /proc; the step messages in between repeat the last
reading. Neither synchronises with the GPU.
"""

from __future__ import annotations

import sys
import time
from typing import Any

RESOURCE_PERIOD_S = 1.0  # process CPU and RSS, and the allocator's counters, are read at most this often


class ProcessFigures:
    def __init__(self, cuda: bool, cuda_device: int) -> None:
        self._cuda = cuda
        self._cuda_device = cuda_device
        self._resources: dict[str, float | None] = {"cpu_pct": None, "rss_bytes": None}
        self._resources_at = 0.0
        self._memory: dict[str, float] = {}
        self._memory_at = 0.0
        self._process: Any = None

    def gpu_memory(self) -> dict[str, float]:
        """The allocator's counters (mem_allocated_bytes, mem_reserved_bytes, mem_peak_bytes)."""
        if not self._cuda:
            return {}
        now = time.monotonic()
        if now - self._memory_at >= RESOURCE_PERIOD_S:
            self._memory_at = now
            stats = sys.modules["torch"].cuda.memory_stats(self._cuda_device)  # no sync
            self._memory = {
                "mem_allocated_bytes": stats.get("allocated_bytes.all.current"),
                "mem_reserved_bytes": stats.get("reserved_bytes.all.current"),
                "mem_peak_bytes": stats.get("allocated_bytes.all.peak"),
            }
        return self._memory

    def process(self) -> dict[str, float | None]:
        """This process's CPU % and RSS (psutil, imported on first use)."""
        now = time.monotonic()
        if now - self._resources_at >= RESOURCE_PERIOD_S:
            self._resources_at = now
            try:
                if self._process is None:
                    import psutil

                    self._process = psutil.Process()
                    self._process.cpu_percent()
                self._resources = {"cpu_pct": self._process.cpu_percent(), "rss_bytes": self._process.memory_info().rss}
            except Exception:
                self._resources = {"cpu_pct": None, "rss_bytes": None}
        return self._resources
