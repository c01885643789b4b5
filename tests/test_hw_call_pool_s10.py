"""The PCIe window's calls side by side on kept threads (gpumix/hw/call_pool.py, session 10, issue 13) as the
concurrent.futures pool it replaces ran them: results in order, at most max_workers at once, the first failure
(in order) raised after all are done; and a tick makes no Future."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import pytest

from gpumix.hw.call_pool import CallPool
from tests.test_nvml_backend import SlowThroughputNvml, make_rig


def test_results_come_in_the_calls_order() -> None:
    pool = CallPool(max_workers=4)
    calls = [(lambda x, y: (x, y, threading.current_thread().name), (i, -i)) for i in range(50)]
    values = pool.run(calls)
    assert [value[:2] for value in values] == [(i, -i) for i in range(50)]
    assert {value[2] for value in values} <= {f"pool_{n}" for n in range(4)}
    assert pool.run([]) == []
    pool.shutdown()
    with pytest.raises(RuntimeError):
        pool.run(calls)


def test_at_most_max_workers_at_once_and_all_of_them() -> None:
    pool = CallPool(max_workers=3)
    lock, active, peak = threading.Lock(), [0], [0]
    barrier = threading.Barrier(3, timeout=5)

    def call() -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        barrier.wait()  # three at once, or this raises
        with lock:
            active[0] -= 1

    pool.run([(call, ())] * 9)
    assert peak[0] == 3
    pool.shutdown()


def test_the_first_failure_in_order_is_raised_once_all_are_done() -> None:
    pool = CallPool(max_workers=8)
    finished: list[int] = []

    def call(i: int) -> int:
        if i in (5, 2):
            time.sleep(0.01 * (i == 2))
            raise ValueError(i)
        time.sleep(0.02 * (i == 7))
        finished.append(i)
        return i

    with pytest.raises(ValueError, match="2"):
        pool.run([(call, (i,)) for i in range(8)])
    assert sorted(finished) == [0, 1, 3, 4, 6, 7]
    assert pool.run([(call, (1,))]) == [1]  # the pool still works
    pool.shutdown()


def test_the_pcie_window_makes_no_future(monkeypatch: pytest.MonkeyPatch) -> None:
    made = make_rig(SlowThroughputNvml)
    made_futures: list[object] = []
    real_init = futures.Future.__init__

    def counting(self: futures.Future[object]) -> None:
        made_futures.append(self)
        real_init(self)

    monkeypatch.setattr(futures.Future, "__init__", counting)
    samples = made.sample()
    assert made.nvml.peak_active >= SlowThroughputNvml.together  # side by side, as before
    assert all(sample.pcie_rx_bytes_per_s is not None for sample in samples)
    assert made_futures == []
    made.backend.close()
