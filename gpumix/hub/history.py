"""Bounded per-GPU history for the charts: a ring of recent samples per GPU."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from gpumix.hw.types import GpuSample

HISTORY_FIELDS = ("util_gpu_pct", "power_w", "mem_used_bytes", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s")


@dataclass
class HistoryPoint:
    timestamp_s: float
    values: dict[str, float | None]


class GpuHistory:
    """Keeps `max_points` points per GPU; memory stays bounded however long we run."""

    def __init__(self, max_points: int) -> None:
        self.max_points = max_points
        self._points: dict[int, deque[HistoryPoint]] = {}

    def add(self, samples: list[GpuSample]) -> None:
        for sample in samples:
            points = self._points.setdefault(sample.index, deque(maxlen=self.max_points))
            values = {name: getattr(sample, name) for name in HISTORY_FIELDS}
            points.append(HistoryPoint(sample.timestamp_s, values))

    def series(self, index: int, name: str) -> list[float | None]:
        return [point.values[name] for point in self._points.get(index, ())]

    def timestamps(self, index: int) -> list[float]:
        return [point.timestamp_s for point in self._points.get(index, ())]
