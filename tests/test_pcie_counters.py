"""PCIe byte counters that wrap at 32 bits (as on a real H200): unwrapped, and read often
enough under load to stay exact."""

from __future__ import annotations

import pytest

from gpumix.cli.hardware import simulated_hardware
from gpumix.sim.machine import GpuActivity
from gpumix.sim.rig import load_builtin_rig
from tests.conftest import ManualClock

FAST = 20e9  # bytes/s: a 4.29 GB counter wraps every 0.21 s


@pytest.fixture
def hardware(clock: ManualClock):
    hardware = simulated_hardware(load_builtin_rig("mixed-10"), clock=clock, wall_clock=clock)
    hardware.machine.synthetic_job = False
    yield hardware
    hardware.backend.close()


def test_slow_traffic_unwraps_across_the_32_bit_boundary(hardware, clock: ManualClock) -> None:
    hardware.machine.set_activity(7, GpuActivity(pcie_tx_bytes_per_s=3e9, pcie_rx_bytes_per_s=1e9))
    hardware.backend.sample()
    for _ in range(5):  # 3 GB per second: the 4.29 GB counter wraps every other tick
        clock.advance(1.0)
        gpu = hardware.backend.sample()[7]
        assert gpu.pcie_tx_bytes_per_s == pytest.approx(3e9, rel=1e-6)
        assert gpu.pcie_rx_bytes_per_s == pytest.approx(1e9, rel=1e-6)


def test_fast_traffic_needs_the_guard_and_the_guard_keeps_it_exact(hardware, clock: ManualClock) -> None:
    backend = hardware.backend
    backend.exact_pcie = True  # the guard (by default a busy fast link takes the 20 ms window instead)
    hardware.machine.set_activity(7, GpuActivity(busy_fraction=1.0, pcie_tx_bytes_per_s=FAST, pcie_rx_bytes_per_s=FAST))
    backend.sample()
    clock.advance(0.1)  # a first short step learns the rate (below one wrap)
    backend.sample()
    # One second later, without intermediate reads, four wraps would be lost: the guard reads.
    elapsed = 0.0
    while elapsed < 1.0 - 1e-9:
        wait_s = backend.poll_pcie_counters()
        assert wait_s <= 0.14, "gen4 x16 (31.5 GB/s) can wrap 4.29 GB in 0.136 s: read at least that often"
        step = min(wait_s, 1.0 - elapsed)
        clock.advance(step)
        elapsed += step
    gpu = backend.sample()[7]
    assert gpu.pcie_tx_bytes_per_s == pytest.approx(FAST, rel=1e-6)
    assert backend._pcie_guard is not None  # the sampler started the guard thread by itself


def test_without_guard_reads_a_fast_link_aliases(hardware, clock: ManualClock) -> None:
    """What the H200 showed before the fix: 1 s between reads at 20 GB/s cannot be exact."""
    hardware.backend.exact_pcie = True  # counters only: no 20 ms window to fall back on
    hardware.backend._guard_stop.set()  # and no guard thread
    hardware.machine.set_activity(7, GpuActivity(pcie_tx_bytes_per_s=FAST, pcie_rx_bytes_per_s=FAST))
    hardware.backend.sample()
    clock.advance(1.0)
    gpu = hardware.backend.sample()[7]
    assert gpu.pcie_tx_bytes_per_s != pytest.approx(FAST, rel=0.01)


def test_idle_gpus_cost_no_extra_reads(hardware, clock: ManualClock) -> None:
    """Idle GeForce links drop to gen1: x16 at 4 GB/s cannot wrap 4.29 GB within a 1 s tick."""
    backend = hardware.backend
    backend.sample()
    clock.advance(1.0)
    backend.sample()
    assert backend.poll_pcie_counters() == 1.0  # nothing due before the next tick
    assert backend._pcie_guard is None
