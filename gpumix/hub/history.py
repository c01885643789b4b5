"""Bounded per-GPU history for the charts: a preallocated ring of recent samples per GPU.

Numbers are kept in flat arrays of doubles (None as NaN), 48 bytes a sample: a point as a dataclass
holding a dict of floats took about 550, so the default hour of 10 GPUs grew the hub by 20 MB while the
ring filled (the 30-minute soak, issue 10); the arrays are allocated once, when a GPU is first seen.
"""

from __future__ import annotations

import math
from array import array

from gpumix.hw.types import GpuSample

HISTORY_FIELDS = ("util_gpu_pct", "power_w", "mem_used_bytes", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s")
_TIME = "timestamp_s"


class _Ring:
    """One GPU's samples: a column per field, `count` of them valid, the oldest at `start`."""

    def __init__(self, max_points: int) -> None:
        self.columns = {name: array("d", bytes(8 * max_points)) for name in (_TIME, *HISTORY_FIELDS)}
        self.max_points = max_points
        self.start = 0
        self.count = 0

    def append(self, values: dict[str, float]) -> None:
        slot = (self.start + self.count) % self.max_points
        for name, column in self.columns.items():
            column[slot] = values[name]
        if self.count < self.max_points:
            self.count += 1
        else:  # full: the oldest sample goes
            self.start = (self.start + 1) % self.max_points

    def column(self, name: str) -> list[float]:
        column, end = self.columns[name], self.start + self.count
        if end <= self.max_points:
            return column[self.start:end].tolist()
        return column[self.start:].tolist() + column[:end - self.max_points].tolist()


def _stored(value: float | int | None) -> float:
    return math.nan if value is None else float(value)


class GpuHistory:
    """Keeps `max_points` points per GPU; memory stays bounded however long we run."""

    def __init__(self, max_points: int) -> None:
        self.max_points = max_points
        self._rings: dict[int, _Ring] = {}

    def add(self, samples: list[GpuSample]) -> None:
        for sample in samples:
            ring = self._rings.get(sample.index)
            if ring is None:
                ring = self._rings[sample.index] = _Ring(self.max_points)
            values = {name: _stored(getattr(sample, name)) for name in HISTORY_FIELDS}
            values[_TIME] = float(sample.timestamp_s)
            ring.append(values)

    def series(self, index: int, name: str) -> list[float | None]:
        ring = self._rings.get(index)
        if ring is None:
            return []
        return [None if math.isnan(value) else value for value in ring.column(name)]

    def timestamps(self, index: int) -> list[float]:
        ring = self._rings.get(index)
        return ring.column(_TIME) if ring is not None else []
