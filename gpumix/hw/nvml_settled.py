"""A GPU's readings that seldom move, asked when something says they may have (issue 13), a part of NvmlBackend.

In an H100's tick (session 12, `hub_gpu_reading_*_h100_s12`) the process list cost 36 µs idle and 191 µs
busy, the temperature, memory clock and link generation 6-24 µs each: about 0.07 ms of an idle GPU's
0.72 ms reading and 0.2 ms of a busy one's 2.2 ms, for values that hold still for minutes. So:

- the fan, the memory clock and the process list are read on the slow interval (5 s), and at once when
  the GPU's activity changes: busy <-> idle (utilization), or its memory in use moves by a MiB or more,
  which a process starting, ending or allocating does;
- the temperature and the link generation are read every tick while the GPU is busy (a warming card, a
  link that retrains under load), with the others when idle;
- the hub asks for all of them on the next tick when a training rank connects or leaves
  (`forget_settled_readings`): its process may come or go before its memory shows.

Between reads a sample carries the last values. The PCIe reading's waking signs (`nvml_pcie._signs`: the
link generation, the clocks, power) still see a GPU that wakes: the SM clock and power are read every
tick, and a wake moves its utilization, which brings every reading here at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pynvml

from gpumix.hw.types import GpuProcess

_MIB = 1 << 20
# asked every tick while busy, otherwise with the settled ones
_BUSY_CALLS: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("nvmlDeviceGetTemperature", (pynvml.NVML_TEMPERATURE_GPU,)), ("nvmlDeviceGetCurrPcieLinkGeneration", ()))
_SETTLED_CALLS: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("nvmlDeviceGetFanSpeed", ()), ("nvmlDeviceGetClockInfo", (pynvml.NVML_CLOCK_MEM,)),
    ("nvmlDeviceGetComputeRunningProcesses", ()))


class SettledReading(NamedTuple):
    """A GPU's seldom-moving readings as last read, and the activity they were read at."""

    temperature_c: float | None
    link_gen: int | None
    fan_pct: float | None
    clock_mem_mhz: float | None
    processes: tuple[tuple[int, int | None], ...]  # (pid, GPU memory bytes) as NVML listed them
    read_at_s: float
    busy: bool
    mem_used_bytes: int | None


def _moved(then_bytes: int | None, now_bytes: int | None) -> bool:
    if then_bytes is None or now_bytes is None:
        return then_bytes is not now_bytes
    return abs(now_bytes - then_bytes) >= _MIB


class NvmlSettled:
    """The seldom readings' schedule (uses NvmlBackend's `_guarded_calls`, `_clock`, `_slow_interval_s`)."""

    _guarded_calls: Callable[[int, tuple[tuple[str, tuple[Any, ...]], ...]], list[Any]]
    _clock: Callable[[], float]
    _slow_interval_s: float
    _settled: dict[int, SettledReading]  # gpu -> its seldom readings as last read

    def _settled_reading(self, index: int, busy: bool, mem_used_bytes: int | None) -> SettledReading:
        """This tick's seldom readings of GPU `index`: read (all, or the busy pair) or carried."""
        now = self._clock()
        known = self._settled.get(index)
        if (known is None or now - known.read_at_s >= self._slow_interval_s or known.busy != busy
                or _moved(known.mem_used_bytes, mem_used_bytes)):
            temperature, gen, fan, clock_mem, processes = self._guarded_calls(index, _BUSY_CALLS + _SETTLED_CALLS)
            listed = tuple((int(p.pid), p.usedGpuMemory) for p in processes or ())
            known = self._settled[index] = SettledReading(
                temperature, gen, fan, clock_mem, listed, now, busy, mem_used_bytes)
        elif busy:
            temperature, gen = self._guarded_calls(index, _BUSY_CALLS)
            known = self._settled[index] = known._replace(temperature_c=temperature, link_gen=gen)
        return known

    def forget_settled_readings(self) -> None:
        """Read every GPU's settled readings on the next tick (the hub: a training rank came or went, so a
        process may have, before its memory shows)."""
        self._settled.clear()

    @staticmethod
    def _processes(reading: SettledReading) -> list[GpuProcess]:
        return [GpuProcess(pid=pid, gpu_mem_bytes=memory) for pid, memory in reading.processes]
