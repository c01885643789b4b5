"""The hub's chart history: the ring keeps the newest samples in order and costs a fixed amount.

Issue 10's 30-minute soak grew the hub by 20.1 MB against a 20 MB goal, and with a one-minute ring by
11.5 MB: the default hour of history (a dataclass holding a dict of floats per point, about 550 bytes)
was filling. The ring is now preallocated arrays of doubles.
"""

from __future__ import annotations

import random
import tracemalloc
from collections import deque

from gpumix.hub.history import HISTORY_FIELDS, GpuHistory
from gpumix.hw.types import GpuSample


def sample(index: int, t: float, rng: random.Random) -> GpuSample:
    def maybe(value: float) -> float | None:
        return None if rng.random() < 0.1 else value
    return GpuSample(index=index, uuid=f"GPU-{index}", timestamp_s=t, util_gpu_pct=maybe(rng.uniform(0, 100)),
                     power_w=maybe(rng.uniform(20, 450)), mem_used_bytes=maybe(rng.randrange(1, 24 << 30)),
                     pcie_rx_bytes_per_s=maybe(rng.uniform(0, 3e10)), pcie_tx_bytes_per_s=maybe(rng.uniform(0, 3e10)))


def test_the_ring_keeps_the_newest_points_in_order_with_gaps_as_none() -> None:
    rng = random.Random(7)
    history = GpuHistory(max_points=50)
    expected: dict[int, deque[GpuSample]] = {0: deque(maxlen=50), 3: deque(maxlen=50)}
    for tick in range(173):  # wraps more than three times, and stops mid-ring
        batch = [sample(0, 1000.0 + tick, rng), sample(3, 1000.0 + tick, rng)]
        history.add(batch)
        for one in batch:
            expected[one.index].append(one)
        if tick in (0, 49, 50, 120, 172):
            for index, points in expected.items():
                assert history.timestamps(index) == [p.timestamp_s for p in points]
                for name in HISTORY_FIELDS:
                    assert history.series(index, name) == [getattr(p, name) for p in points], (tick, name)
    assert history.series(1, "power_w") == [] and history.timestamps(1) == []


def test_an_hour_of_ten_gpus_costs_a_fixed_two_megabytes() -> None:
    rng = random.Random(1)
    batches = [[sample(index, float(t), rng) for index in range(10)] for t in range(3600)]
    tracemalloc.start()
    try:
        history = GpuHistory(max_points=3600)
        history.add(batches[0])
        after_first = tracemalloc.get_traced_memory()[0]
        for batch in batches[1:]:
            history.add(batch)
        full = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after_first < 2.2e6  # 10 GPUs x 3600 points x 6 doubles, allocated up front
    assert full - after_first < 100_000  # filling the ring allocates nothing more (the old one: ~20 MB)
