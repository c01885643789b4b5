"""A GPU's readings that seldom move, asked when something says they may have (issue 13), a part of NvmlBackend.

In an H100's tick (session 12, `hub_gpu_reading_*_h100_s12`) the process list cost 36 µs idle and 191 µs
busy, the temperature 16-24 µs, for values that hold still for minutes. So:

- the fan and the process list are read on the slow interval (5 s), and at once when the GPU's activity
  changes: busy <-> idle (utilization), or its memory in use moves by a MiB or more, which a process
  starting, ending or allocating does; and once more the tick after (NVML may list a process a moment
  after its memory shows);
- the temperature is read every tick while the GPU is busy (a warming card), with the others when idle;
- the hub asks for all of them on the next tick when a training rank connects or leaves
  (`forget_settled_readings`): its process may come or go before its memory shows.

Between reads a sample carries the last values; a reading that failed for now is asked again the next
tick (the process list keeps its last value meanwhile, not an empty one). The link generation and the
memory clock stay every-tick readings (6-13 µs each): with the SM clock and power they are the PCIe
reading's waking signs (`nvml_pcie._signs`), which must see a copy that moves no utilization.
What it costs: an idle GPU's temperature and fan are up to 5 s old, and a process that starts with no
memory of its own, not a gpumix rank, is listed within 5 s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pynvml

from gpumix.hw.types import GpuProcess

_MIB = 1 << 20
# asked every tick while busy, otherwise with the settled ones
_BUSY_CALLS: tuple[tuple[str, tuple[Any, ...]], ...] = (("nvmlDeviceGetTemperature", (pynvml.NVML_TEMPERATURE_GPU,)),)
_SETTLED_CALLS: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("nvmlDeviceGetFanSpeed", ()), ("nvmlDeviceGetComputeRunningProcesses", ()))


class SettledReading(NamedTuple):
    """A GPU's seldom-moving readings as last read, and the activity they were read at."""

    temperature_c: float | None
    fan_pct: float | None
    processes: tuple[tuple[int, int | None], ...]  # (pid, GPU memory bytes) as NVML listed them
    read_at_s: float
    busy: bool
    mem_used_bytes: int | None


def _moved(then_bytes: int | None, now_bytes: int | None) -> bool:
    if then_bytes is None or now_bytes is None:
        return then_bytes is not now_bytes
    return abs(now_bytes - then_bytes) >= _MIB


class NvmlSettled:
    """The seldom readings' schedule (uses NvmlBackend's `_guarded_calls`, `_failed_for_now`, `_clock`,
    `_slow_interval_s`)."""

    _guarded_calls: Callable[[int, tuple[tuple[str, tuple[Any, ...]], ...]], list[Any]]
    _clock: Callable[[], float]
    _slow_interval_s: float
    _settled: dict[int, SettledReading]  # gpu -> its seldom readings as last read
    _failed_for_now: Callable[[int, tuple[str, ...], list[Any]], bool]

    def _settled_reading(self, index: int, busy: bool, mem_used_bytes: int | None) -> SettledReading:
        """This tick's seldom readings of GPU `index`: read (all, or the temperature while busy) or carried."""
        now = self._clock()
        known = self._settled.get(index)
        moved = known is not None and (known.busy != busy or _moved(known.mem_used_bytes, mem_used_bytes))
        if known is None or moved or now - known.read_at_s >= self._slow_interval_s:
            calls = _BUSY_CALLS + _SETTLED_CALLS
            values = self._guarded_calls(index, calls)
            temperature, fan, processes = values
            if processes is not None:
                listed = tuple((int(p.pid), p.usedGpuMemory) for p in processes)
            else:  # not read: the last list, not an empty one (a process may be moving data)
                listed = known.processes if known is not None else ()
            # asked again next tick: after a move (NVML may list a process a moment after its memory shows),
            # or where a reading failed for now (not unsupported), not in a slow interval
            failed = self._failed_for_now(index, tuple(name for name, _ in calls), values)
            read_at_s = now - self._slow_interval_s if moved or failed else now
            known = self._settled[index] = SettledReading(temperature, fan, listed, read_at_s, busy, mem_used_bytes)
        elif busy:
            temperature, = self._guarded_calls(index, _BUSY_CALLS)
            known = self._settled[index] = known._replace(temperature_c=temperature)
        return known

    def forget_settled_readings(self) -> None:
        """Read every GPU's settled readings on the next tick (the hub: a training rank came or went, so a
        process may have, before its memory shows)."""
        self._settled.clear()

    @staticmethod
    def _processes(reading: SettledReading) -> list[GpuProcess]:
        return [GpuProcess(pid=pid, gpu_mem_bytes=memory) for pid, memory in reading.processes]
