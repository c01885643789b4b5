"""Bounded per-GPU history for the charts: a preallocated ring of recent samples per GPU.

Numbers are kept in flat arrays of doubles (None as NaN), 48 bytes a sample: a point as a dataclass
holding a dict of floats took about 550, so the default hour of 10 GPUs grew the hub by 20 MB while the
ring filled (the 30-minute soak, issue 10); the arrays are allocated once, when a GPU is first seen.
"""

from __future__ import annotations

import math
import operator
from array import array

from gpumix.hw.types import GpuSample

HISTORY_FIELDS = ("util_gpu_pct", "power_w", "mem_used_bytes", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s")
_TIME = "timestamp_s"
_COLUMNS = (_TIME, *HISTORY_FIELDS)
_READ = operator.attrgetter(*_COLUMNS)  # a sample's values in column order, in one call


class _Ring:
    """One GPU's samples: a column per field, `count` of them valid, the oldest at `start`."""

    def __init__(self, max_points: int) -> None:
        self.columns = {name: array("d", bytes(8 * max_points)) for name in _COLUMNS}
        self._ordered = tuple(self.columns.values())  # in _COLUMNS' order
        self.max_points = max_points
        self.start = 0
        self.count = 0

    def append(self, values: tuple[float | int | None, ...]) -> None:
        """One sample's values in _COLUMNS' order (None as NaN; an int is stored as its double)."""
        slot = (self.start + self.count) % self.max_points
        for column, value in zip(self._ordered, values, strict=True):
            column[slot] = math.nan if value is None else value
        if self.count < self.max_points:
            self.count += 1
        else:  # full: the oldest sample goes
            self.start = (self.start + 1) % self.max_points

    def column(self, name: str) -> list[float]:
        column, end = self.columns[name], self.start + self.count
        if end <= self.max_points:
            return column[self.start:end].tolist()
        return column[self.start:].tolist() + column[:end - self.max_points].tolist()


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
            ring.append(_READ(sample))  # a tuple, not a dict of floats: 4 calls a GPU, not 14 (issue 13)

    def series(self, index: int, name: str) -> list[float | None]:
        ring = self._rings.get(index)
        if ring is None:
            return []
        return [None if math.isnan(value) else value for value in ring.column(name)]

    def timestamps(self, index: int) -> list[float]:
        ring = self._rings.get(index)
        return ring.column(_TIME) if ring is not None else []
