"""The simulated rig behaves like a box of GeForce cards, deterministically."""

from __future__ import annotations

import pynvml
import pytest

from gpumix.cli.hardware import simulated_hardware
from gpumix.sim.machine import GpuActivity, SimMachine
from gpumix.sim.nvml import SimHandle, SimNvml
from gpumix.sim.rig import load_builtin_rig
from tests.conftest import ManualClock


@pytest.fixture
def machine(clock: ManualClock) -> SimMachine:
    machine = SimMachine(load_builtin_rig("mixed-10"), clock=clock)
    machine.synthetic_job = False
    return machine


def test_p2p_refused_like_geforce(machine: SimMachine) -> None:
    nvml = SimNvml(machine)
    nvml.nvmlInit()
    assert nvml.nvmlDeviceGetP2PStatus(SimHandle(3), SimHandle(7), 0) == 2  # GPU not supported
    with pytest.raises(TypeError):  # the (0,) tuple of nvidia-ml-py 13 is refused, as by ctypes
        nvml.nvmlDeviceGetP2PStatus(SimHandle(3), SimHandle(7), (0,))


def test_link_drops_to_gen1_at_idle_and_returns_under_load(machine: SimMachine) -> None:
    assert machine.link_gen_current(7) == 1
    machine.set_activity(7, GpuActivity(busy_fraction=0.9, util_pct=90))
    assert machine.link_gen_current(7) == 4


def test_power_follows_load_up_to_the_cap(machine: SimMachine) -> None:
    idle = machine.power_w(7)
    machine.set_activity(7, GpuActivity(busy_fraction=0.5, util_pct=50))
    half = machine.power_w(7)
    machine.set_activity(7, GpuActivity(busy_fraction=1.0, util_pct=100))
    full = machine.power_w(7)
    assert idle < half < full <= 450
    assert machine.power_capped(7)
    machine.set_power_cap_w(7, 300)
    assert machine.power_w(7) <= 300


def test_some_calls_not_supported(machine: SimMachine) -> None:
    nvml = SimNvml(machine)
    nvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetPcieReplayCounter(SimHandle(0))  # the 3060 model refuses it
    assert nvml.nvmlDeviceGetPcieReplayCounter(SimHandle(3)) == 0


def test_set_power_limit_checks_range(machine: SimMachine) -> None:
    nvml = SimNvml(machine)
    nvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceSetPowerManagementLimit(SimHandle(0), 250_000)
    nvml.nvmlDeviceSetPowerManagementLimit(SimHandle(0), 150_000)
    assert nvml.nvmlDeviceGetPowerManagementLimit(SimHandle(0)) == 150_000


def test_equal_split_makes_the_3060s_the_stragglers(clock: ManualClock) -> None:
    hardware = simulated_hardware(load_builtin_rig("mixed-10"), clock=clock)
    hardware.machine.run_synthetic_job()
    hardware.backend.sample()
    clock.advance(1.0)
    samples = hardware.backend.sample()
    utils = [s.util_gpu_pct for s in samples]
    assert min(utils[0:3]) > 70 and max(utils[7:10]) < 40  # 4090s wait for the 3060s
    # every GPU moves the all-reduce through its own link: ~2(n-1)/n x gradient per step
    assert all(s.pcie_tx_bytes_per_s and s.pcie_tx_bytes_per_s > 1e8 for s in samples)


def test_deterministic_under_seed() -> None:
    def readings() -> list[tuple]:
        clock = ManualClock()
        hardware = simulated_hardware(load_builtin_rig("mixed-10"), clock=clock, wall_clock=clock)
        out = []
        for _ in range(3):
            hardware.machine.tick()
            out.append(tuple((s.util_gpu_pct, s.power_w, s.pcie_rx_bytes_per_s) for s in hardware.backend.sample()))
            clock.advance(1.0)
        return out

    assert readings() == readings()


def test_chipset_gpus_share_the_uplink() -> None:
    rig = load_builtin_rig("mixed-10")
    from gpumix.sim.machine import effective_link_bytes_per_s

    x4_chipset = effective_link_bytes_per_s(rig, 0)
    x8_cpu = effective_link_bytes_per_s(rig, 3)
    x1_riser = effective_link_bytes_per_s(rig, 2)
    assert x1_riser < x4_chipset < x8_cpu
