"""One-shots on real GPUs read once, with PCIe rates from NVML's own window (issue 13).

`gpumix doctor`, `gpumix power` and `gpumix-top --once` without a hub used to read the GPUs twice,
0.5 s apart, because PCIe rates are differences of two counter readings: most of their wall time.
On real GPUs (no simulated world behind the backend) they now read once and take each GPU's rate
from nvmlDeviceGetPcieThroughput. Played on the NVML look-alike, with a clock that never moves:
two readings at the same instant could give no counter rate at all.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpumix.cli.power import local_source
from gpumix.hw.hardware import Hardware
from gpumix.hw.nvml_backend import NvmlBackend
from gpumix.sim.machine import SimMachine
from gpumix.sim.nvml import SimHandle, SimNvml
from gpumix.sim.rig import load_builtin_rig
from tests.conftest import ManualClock


class CountingNvml(SimNvml):
    def __init__(self, machine: SimMachine) -> None:
        super().__init__(machine)
        self.calls: Counter[str] = Counter()

    def nvmlDeviceGetPcieThroughput(self, handle: SimHandle, counter: int) -> int:
        self.calls["window"] += 1
        return super().nvmlDeviceGetPcieThroughput(handle, counter)

    def nvmlDeviceGetPowerUsage(self, handle: SimHandle) -> Any:
        self.calls["power"] += 1
        return super().nvmlDeviceGetPowerUsage(handle)


def real_looking_hardware() -> tuple[Hardware, SimMachine, CountingNvml]:
    clock = ManualClock()
    machine = SimMachine(load_builtin_rig("mixed-10"), clock=clock)  # the demo job: every GPU moves data
    machine.tick()
    nvml = CountingNvml(machine)
    backend = NvmlBackend(nvml=nvml, clock=clock, wall_clock=clock)
    backend._guard_stop.set()  # no guard thread: only the one-shot's own reads
    return Hardware(backend=backend, source="nvml"), machine, nvml


def test_a_one_shot_on_real_gpus_reads_once_with_rates_from_the_window() -> None:
    hardware, machine, nvml = real_looking_hardware()
    try:
        hub = local_source(hardware, settle_s=0.5)
        snapshot = hub.snapshot()
    finally:
        hardware.backend.close()
    gpus = len(machine.gpus)
    assert nvml.calls["power"] == gpus  # one reading of each GPU, not two
    assert nvml.calls["window"] == 2 * gpus  # rx and tx of each
    for gpu, truth in zip(snapshot["gpus"], machine.gpus, strict=True):
        assert truth.activity.pcie_rx_bytes_per_s > 0
        assert gpu["pcie_rx_bytes_per_s"] == int(truth.activity.pcie_rx_bytes_per_s / 1000) * 1000.0
