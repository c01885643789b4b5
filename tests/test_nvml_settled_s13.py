"""The seldom-moving readings' schedule (gpumix/hw/nvml_settled.py, session 13, issue 13): the fan and the process
list once a slow interval, the tick the GPU's activity changes (busy <-> idle, its memory in use moving by a MiB
or more) and once more the tick after; the temperature every tick while busy; the link generation and the clocks
every tick (the PCIe reading's waking signs). Between reads a sample carries what was last read; a reading that
failed for now is asked again next tick. On the simulated rig through the real NvmlBackend (CountingNvml)."""

from __future__ import annotations

from typing import Any

import pynvml

from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.hub.ranks import parse_hello
from gpumix.sim.machine import IDLE_MEM_BYTES, GpuActivity
from gpumix.sim.nvml import SimHandle
from gpumix.sim.rig import load_builtin_rig
from tests.conftest import ManualClock, ticked_hub
from tests.test_nvml_backend import CountingNvml, make_rig

GPU = 3
SETTLED = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetFanSpeed")
BUSY = ("nvmlDeviceGetTemperature",)
CONTEXT_BYTES = 512 * 2**20  # a CUDA context's memory


class TemperatureNvml(CountingNvml):
    """Answers the temperature it is set to (the world's own moves too slowly to tell a carried value)."""

    temperature_c = 40

    def nvmlDeviceGetTemperature(self, handle: SimHandle, sensor: int) -> int:
        super().nvmlDeviceGetTemperature(handle, sensor)
        return self.temperature_c


class WakingNvml(CountingNvml):
    """GPU 3's link (gen 1 -> 4) and memory clock (405 -> 10501 MHz) move when it wakes, its SM clock and power do
    not; its counter reads and each GPU's clock reads by kind are counted."""

    woke = False

    def __init__(self, machine: Any) -> None:
        super().__init__(machine)
        self.field_reads: dict[int, int] = {}
        self.clock_reads: dict[tuple[int, int], int] = {}

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: SimHandle) -> int:
        generation = super().nvmlDeviceGetCurrPcieLinkGeneration(handle)
        return (4 if self.woke else 1) if handle.index == GPU else generation

    def nvmlDeviceGetClockInfo(self, handle: SimHandle, kind: int) -> int:
        self.clock_reads[(handle.index, kind)] = self.clock_reads.get((handle.index, kind), 0) + 1
        mhz = super().nvmlDeviceGetClockInfo(handle, kind)
        if handle.index != GPU:
            return mhz
        return (10501 if self.woke else 405) if kind == pynvml.NVML_CLOCK_MEM else 210

    def nvmlDeviceGetPowerUsage(self, handle: SimHandle) -> int:
        milliwatts = super().nvmlDeviceGetPowerUsage(handle)
        return 20000 if handle.index == GPU else milliwatts

    def nvmlDeviceGetFieldValues(self, handle: SimHandle, fields: list[int]) -> Any:
        self.field_reads[handle.index] = self.field_reads.get(handle.index, 0) + 1
        return super().nvmlDeviceGetFieldValues(handle, fields)


def _read_this_tick(made: Any) -> bool:
    """One tick; whether it read GPU 3's PCIe counters."""
    before = made.nvml.field_reads.get(GPU, 0)
    made.sample()
    return made.nvml.field_reads.get(GPU, 0) > before


def _idle_rig(nvml: type[CountingNvml] = CountingNvml) -> Any:
    made = make_rig(nvml, synthetic_job=False)
    made.sample()  # the first tick reads everything
    return made


def _counts(made: Any, names: tuple[str, ...]) -> dict[str, int]:
    return {name: made.calls(GPU, name) for name in names}


def test_an_idle_gpu_reads_its_settled_readings_once_a_slow_interval() -> None:
    made = _idle_rig(WakingNvml)
    first = _counts(made, SETTLED + BUSY)
    assert first == dict.fromkeys(SETTLED + BUSY, 1)
    for _ in range(4):
        made.sample()  # 1-4 s after the read: carried
    assert _counts(made, SETTLED + BUSY) == first
    assert made.calls(GPU, "nvmlDeviceGetCurrPcieLinkGeneration") == 5  # a waking sign: every tick
    assert made.nvml.clock_reads[(GPU, pynvml.NVML_CLOCK_MEM)] == 5  # the other one, every tick too
    made.sample()  # 5 s: the slow interval
    assert _counts(made, SETTLED + BUSY) == dict.fromkeys(SETTLED + BUSY, 2)


def test_a_busy_gpu_reads_its_temperature_every_tick_the_rest_once_a_slow_interval() -> None:
    made = _idle_rig()
    made.machine.set_activity(GPU, GpuActivity(busy_fraction=0.9, util_pct=90.0, mem_used_bytes=IDLE_MEM_BYTES))
    made.sample()  # idle -> busy: everything read, and once more the tick after
    made.sample()
    assert _counts(made, SETTLED + BUSY) == dict.fromkeys(SETTLED + BUSY, 3)
    for _ in range(4):
        made.sample()
    assert _counts(made, BUSY) == dict.fromkeys(BUSY, 7)
    assert _counts(made, SETTLED) == dict.fromkeys(SETTLED, 3)
    made.sample()  # 5 s after the last read
    assert _counts(made, SETTLED) == dict.fromkeys(SETTLED, 4)


def test_a_process_that_starts_is_listed_the_tick_its_memory_shows() -> None:
    made = _idle_rig()
    made.machine.set_activity(GPU, GpuActivity(pids=[4242], mem_used_bytes=IDLE_MEM_BYTES + CONTEXT_BYTES))
    sample = made.sample()[GPU]
    assert [process.pid for process in sample.processes] == [4242]
    assert sample.processes[0].gpu_mem_bytes == IDLE_MEM_BYTES + CONTEXT_BYTES
    made.sample()
    assert [process.pid for process in made.sample()[GPU].processes] == [4242]  # carried, not dropped
    made.machine.set_activity(GPU, GpuActivity(mem_used_bytes=IDLE_MEM_BYTES))  # it ends: its memory goes
    assert made.sample()[GPU].processes == []


def test_a_process_listed_a_tick_after_its_memory_showed_is_seen_that_tick() -> None:
    made = _idle_rig()
    made.machine.set_activity(GPU, GpuActivity(mem_used_bytes=IDLE_MEM_BYTES + CONTEXT_BYTES))  # memory first
    assert made.sample()[GPU].processes == []
    made.machine.set_activity(GPU, GpuActivity(pids=[4242], mem_used_bytes=IDLE_MEM_BYTES + CONTEXT_BYTES))
    assert [process.pid for process in made.sample()[GPU].processes] == [4242]  # the read the tick after a move


def test_a_process_whose_memory_never_moves_is_listed_within_the_slow_interval() -> None:
    """The limit, as docs/hardware.md says: a process not a gpumix rank, with no memory of its own."""
    made = _idle_rig()
    made.sample()
    made.machine.set_activity(GPU, GpuActivity(pids=[4242]))
    seen = [[p.pid for p in made.sample()[GPU].processes] for _ in range(4)]
    assert seen == [[], [], [], [4242]]  # the first read is 5 s after the last


def test_memory_that_moves_under_a_mib_brings_no_read() -> None:
    made = _idle_rig()
    made.machine.set_activity(GPU, GpuActivity(mem_used_bytes=IDLE_MEM_BYTES + 2**20 - 4096))
    made.sample()
    assert _counts(made, SETTLED) == dict.fromkeys(SETTLED, 1)
    made.machine.set_activity(GPU, GpuActivity(mem_used_bytes=IDLE_MEM_BYTES + 2**20))
    made.sample()
    assert _counts(made, SETTLED) == dict.fromkeys(SETTLED, 2)


def test_busy_to_idle_reads_everything_that_tick() -> None:
    made = _idle_rig()
    made.machine.set_activity(GPU, GpuActivity(busy_fraction=0.9, util_pct=90.0))
    made.sample()
    made.sample()
    made.sample()
    assert _counts(made, SETTLED) == dict.fromkeys(SETTLED, 3)  # the first, the move, the tick after
    made.machine.set_activity(GPU, GpuActivity())
    made.sample()
    assert _counts(made, SETTLED) == dict.fromkeys(SETTLED, 4)


def test_carried_values_are_the_last_read_and_a_busy_tick_refreshes_the_temperature() -> None:
    made = _idle_rig(TemperatureNvml)
    made.nvml.temperature_c = 55
    assert made.sample()[GPU].temperature_c == 40  # idle, 1 s after the read: carried
    made.machine.set_activity(GPU, GpuActivity(busy_fraction=0.9, util_pct=90.0))
    assert made.sample()[GPU].temperature_c == 55
    made.nvml.temperature_c = 61
    assert made.sample()[GPU].temperature_c == 61  # busy: every tick
    made.machine.set_activity(GPU, GpuActivity())
    made.nvml.temperature_c = 62
    assert made.sample()[GPU].temperature_c == 62  # busy -> idle: read
    assert made.sample()[GPU].temperature_c == 62  # and the tick after
    made.nvml.temperature_c = 70
    assert made.sample()[GPU].temperature_c == 62  # idle again: carried (not None, not a stale older value)


def test_a_copy_that_moves_no_utilization_wakes_the_pcie_reading_by_its_link_and_memory_clock() -> None:
    """A copy from another PID namespace into memory already held: no kernel, no process listed, memory, SM
    clock and power as they were; the link retrains and the memory clock rises (nvml_pcie._signs). The
    counters are read the tick it shows (the review's case: carried, they were read up to 4 s late)."""
    made = _idle_rig(WakingNvml)
    quiet = next((tick for tick in range(20) if not _read_this_tick(made)), None)
    assert quiet is not None  # a tick that read no counters: the GPU is quiet, its rates carried
    assert not _read_this_tick(made)
    made.nvml.woke = True
    made.machine.set_activity(GPU, GpuActivity(pcie_tx_bytes_per_s=3e9, pcie_rx_bytes_per_s=3e9))
    assert _read_this_tick(made)


def _busy_hub_gpu(clock: ManualClock) -> tuple[Hub, int]:
    """A hub over the demo rig (its real NvmlBackend over the simulated NVML), GPU 3 busy with a job's memory."""
    hardware = simulated_hardware(load_builtin_rig("mixed-10"), clock=clock, wall_clock=lambda: 1_764_500_000.0 + clock())
    hardware.machine.synthetic_job = False
    busy = GpuActivity(busy_fraction=0.9, util_pct=90.0, mem_used_bytes=IDLE_MEM_BYTES + CONTEXT_BYTES)
    hardware.machine.set_activity(GPU, busy)
    hub = ticked_hub(hardware, clock, ticks=2)
    # the job's process is listed now, its memory already counted (a world where memory came first)
    hardware.machine.set_activity(GPU, GpuActivity(busy_fraction=0.9, util_pct=90.0, pids=[4242],
                                                   mem_used_bytes=IDLE_MEM_BYTES + CONTEXT_BYTES))
    return hub, GPU


def _pids(hub: Hub, gpu: int) -> list[int]:
    return [process["pid"] for process in hub.snapshot()["gpus"][gpu]["processes"]]


def test_a_rank_that_connects_brings_the_process_list_on_the_next_tick(clock: ManualClock) -> None:
    hub, gpu = _busy_hub_gpu(clock)
    hub.tick()
    assert _pids(hub, gpu) == []  # memory did not move: carried until the slow interval
    hub.agent_hello(parse_hello({"rank": 0, "world_size": 1, "job": "j", "pid": 4242,
                                 "gpu_uuid": hub.snapshot()["gpus"][gpu]["uuid"]}))
    clock.advance(1.0)
    hub.tick()
    assert _pids(hub, gpu) == [4242]


def test_a_settled_reading_that_failed_for_now_is_asked_again_next_tick_keeping_the_last_list() -> None:
    made = _idle_rig()
    made.machine.set_activity(GPU, GpuActivity(pids=[4242], mem_used_bytes=IDLE_MEM_BYTES + CONTEXT_BYTES))
    assert [p.pid for p in made.sample()[GPU].processes] == [4242]
    made.machine.faults[(GPU, "nvmlDeviceGetComputeRunningProcesses")] = pynvml.NVML_ERROR_TIMEOUT
    made.machine.set_activity(GPU, GpuActivity(pids=[4242], mem_used_bytes=IDLE_MEM_BYTES + 2 * CONTEXT_BYTES))
    assert [p.pid for p in made.sample()[GPU].processes] == [4242]  # not read: the last list, not []
    reads = made.calls(GPU, "nvmlDeviceGetFanSpeed")
    del made.machine.faults[(GPU, "nvmlDeviceGetComputeRunningProcesses")]
    sample = made.sample()[GPU]  # 1 s later, memory unchanged: asked again all the same
    assert made.calls(GPU, "nvmlDeviceGetFanSpeed") == reads + 1
    assert sample.processes[0].gpu_mem_bytes == IDLE_MEM_BYTES + 2 * CONTEXT_BYTES
    made.sample()
    assert made.calls(GPU, "nvmlDeviceGetFanSpeed") == reads + 1  # read fine: carried again


def test_an_unsupported_settled_reading_does_not_bring_a_read_every_tick() -> None:
    made = _idle_rig()
    made.machine.faults[(GPU, "nvmlDeviceGetTemperature")] = pynvml.NVML_ERROR_NOT_SUPPORTED
    made.sample(advance_s=5.0)  # read: the temperature answers NotSupported, remembered
    reads = made.calls(GPU, "nvmlDeviceGetFanSpeed")
    for _ in range(3):
        assert made.sample()[GPU].temperature_c is None
    assert made.calls(GPU, "nvmlDeviceGetFanSpeed") == reads


def test_a_rank_that_leaves_brings_the_process_list_on_the_next_tick(clock: ManualClock) -> None:
    hub, gpu = _busy_hub_gpu(clock)
    key = hub.agent_hello(parse_hello({"rank": 0, "world_size": 1, "job": "j", "pid": 4242,
                                       "gpu_uuid": hub.snapshot()["gpus"][gpu]["uuid"]}))
    clock.advance(1.0)
    hub.tick()
    assert _pids(hub, gpu) == [4242]
    for _ in range(2):  # past the read the tick after: the list is carried from here
        clock.advance(1.0)
        hub.tick()
    hub.hardware.machine.set_activity(gpu, GpuActivity(busy_fraction=0.9, util_pct=90.0,
                                                       mem_used_bytes=IDLE_MEM_BYTES + CONTEXT_BYTES))
    clock.advance(1.0)
    hub.tick()
    assert _pids(hub, gpu) == [4242]  # its end not seen yet: memory held as it was (another process took it)
    hub.agent_gone(key, 4242)
    clock.advance(1.0)
    hub.tick()
    assert _pids(hub, gpu) == []
