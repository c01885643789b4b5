"""The seldom-moving readings' schedule (gpumix/hw/nvml_settled.py, session 13, issue 13): the fan, the memory
clock and the process list once a slow interval, and the tick the GPU's activity changes (busy <-> idle, its
memory in use moving by a MiB or more); the temperature and the link generation every tick while busy. Between
reads a sample carries what was last read. On the simulated rig through the real NvmlBackend (CountingNvml)."""

from __future__ import annotations

from typing import Any

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
BUSY_PAIR = ("nvmlDeviceGetTemperature", "nvmlDeviceGetCurrPcieLinkGeneration")
CONTEXT_BYTES = 512 * 2**20  # a CUDA context's memory


class TemperatureNvml(CountingNvml):
    """Answers the temperature it is set to (the world's own moves too slowly to tell a carried value)."""

    temperature_c = 40

    def nvmlDeviceGetTemperature(self, handle: SimHandle, sensor: int) -> int:
        super().nvmlDeviceGetTemperature(handle, sensor)
        return self.temperature_c


def _idle_rig(nvml: type[CountingNvml] = CountingNvml) -> Any:
    made = make_rig(nvml, synthetic_job=False)
    made.sample()  # the first tick reads everything
    return made


def _counts(made: Any, names: tuple[str, ...]) -> dict[str, int]:
    return {name: made.calls(GPU, name) for name in names}


def test_an_idle_gpu_reads_its_settled_readings_once_a_slow_interval() -> None:
    made = _idle_rig()
    first = _counts(made, SETTLED + BUSY_PAIR)
    assert first == dict.fromkeys(SETTLED + BUSY_PAIR, 1)
    for _ in range(4):
        made.sample()  # 1-4 s after the read: carried
    assert _counts(made, SETTLED + BUSY_PAIR) == first
    made.sample()  # 5 s: the slow interval
    assert _counts(made, SETTLED + BUSY_PAIR) == dict.fromkeys(SETTLED + BUSY_PAIR, 2)


def test_a_busy_gpu_reads_temperature_and_link_every_tick_the_rest_once_a_slow_interval() -> None:
    made = _idle_rig()
    made.machine.set_activity(GPU, GpuActivity(busy_fraction=0.9, util_pct=90.0, mem_used_bytes=IDLE_MEM_BYTES))
    made.sample()  # idle -> busy: everything read
    assert _counts(made, SETTLED + BUSY_PAIR) == dict.fromkeys(SETTLED + BUSY_PAIR, 2)
    for _ in range(4):
        made.sample()
    assert _counts(made, BUSY_PAIR) == dict.fromkeys(BUSY_PAIR, 6)
    assert _counts(made, SETTLED) == dict.fromkeys(SETTLED, 2)
    made.sample()  # 5 s after the busy read
    assert _counts(made, SETTLED) == dict.fromkeys(SETTLED, 3)


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
    assert _counts(made, SETTLED) == dict.fromkeys(SETTLED, 2)
    made.machine.set_activity(GPU, GpuActivity())
    made.sample()
    assert _counts(made, SETTLED) == dict.fromkeys(SETTLED, 3)


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
    made.nvml.temperature_c = 70
    assert made.sample()[GPU].temperature_c == 62  # idle again: carried (not None, not a stale older value)


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
