"""Host readings through psutil: CPU per core, RAM, swap, and the processes on the GPUs."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from gpumix.hw.core_percents import CorePercents
from gpumix.hw.process_times import ProcessTimes


@dataclass
class HostSample:
    cpu_pct: float
    cpu_per_core_pct: list[float]
    mem_used_bytes: int
    mem_total_bytes: int
    swap_used_bytes: int
    swap_total_bytes: int
    load_avg: list[float] = field(default_factory=list)
    infiniband: bool = False  # an InfiniBand device exists (NCCL would probe it)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProcessSample:
    pid: int
    name: str | None
    user: str | None
    cpu_pct: float | None  # of one core, like top
    rss_bytes: int | None
    command: str | None


def _has_infiniband() -> bool:
    try:
        return any(os.scandir("/sys/class/infiniband"))
    except OSError:
        return False


MEMINFO = "/proc/meminfo"
MEMINFO_MAX_CHARS = 1 << 20  # the file is ~1.5 KB; a bound on what a strange /proc could hand over
# a line whose name (before its first ":", or the whole last line) is one of these, and what follows the ":"
_MEMINFO_FIELDS = re.compile(r"^(MemTotal|MemAvailable|MemFree|SwapTotal|SwapFree)(?::(.*)$|\Z)", re.MULTILINE)
INFINIBAND_EVERY_TICKS = 60  # a device appears with a driver load: looked for once a minute, not every tick


def memory_bytes(meminfo: str = MEMINFO) -> tuple[int, int, int, int] | None:
    """(used, total, swap used, swap total) from one read of /proc/meminfo; None where it cannot
    say (not Linux, an old kernel without MemAvailable). psutil.swap_memory also reads /proc/vmstat
    for the pages swapped in and out, which nothing here shows: 0.4 ms a tick (issue 13)."""
    try:
        with open(meminfo, encoding="ascii") as file:
            text = file.read(MEMINFO_MAX_CHARS)
        # the five lines by one regex, not a partition per line (~55 lines: 110 calls a tick, issue 13)
        fields = {name: int((rest or "").split()[0]) * 1024 for name, rest in _MEMINFO_FIELDS.findall(text)}
    except (OSError, ValueError, IndexError):
        return None
    if not {"MemTotal", "MemAvailable", "SwapTotal", "SwapFree"} <= fields.keys():
        return None
    total, available = fields["MemTotal"], fields["MemAvailable"]
    if available > total:  # a container's LXCFS view can say so; psutil then takes MemFree, as here
        available = fields.get("MemFree", total)
    swap_total = fields["SwapTotal"]
    swap_used = swap_total - fields["SwapFree"]
    # within [0, total] whatever the file says: it is read from outside the process
    return (min(max(total - available, 0), total), total, min(max(swap_used, 0), swap_total), swap_total)


class HostSampler:
    """Keeps what a process's CPU share compares with between ticks. A process's name, user and command do
    not change: read once (psutil), not every tick; its CPU and RSS each tick from /proc (ProcessTimes),
    through psutil where /proc cannot be read."""

    def __init__(self) -> None:
        self._processes: dict[int, psutil.Process] = {}  # psutil's, where /proc cannot be read
        self._static: dict[int, tuple[str | None, str | None, str | None]] = {}
        self._times = ProcessTimes()
        self._proc_readable = self._times.available()
        self._ticks = 0
        self._infiniband = False
        self._cores = CorePercents()  # primed: the first reading has nothing to compare with

    def sample(self) -> HostSample:
        per_core = self._cores.percents()
        if self._ticks % INFINIBAND_EVERY_TICKS == 0:
            self._infiniband = _has_infiniband()
        self._ticks += 1
        memory = memory_bytes()
        if memory is None:
            virtual, swap = psutil.virtual_memory(), psutil.swap_memory()
            memory = (virtual.total - virtual.available, virtual.total, swap.used, swap.total)
        return HostSample(
            cpu_pct=sum(per_core) / len(per_core) if per_core else 0.0,
            cpu_per_core_pct=per_core,
            mem_used_bytes=memory[0],
            mem_total_bytes=memory[1],
            swap_used_bytes=memory[2],
            swap_total_bytes=memory[3],
            load_avg=list(os.getloadavg()) if hasattr(os, "getloadavg") else [],
            infiniband=self._infiniband,
        )

    def processes(self, pids: set[int]) -> dict[int, ProcessSample]:
        for gone in set(self._static) - pids:
            del self._static[gone]
            self._processes.pop(gone, None)
        self._times.keep_only(pids)
        return {pid: self._process(pid) for pid in pids}

    def _process(self, pid: int) -> ProcessSample:
        try:
            if pid not in self._static:
                process = psutil.Process(pid)
                with process.oneshot():
                    self._static[pid] = (process.name(), process.username(), " ".join(process.cmdline())[:200] or None)
            name, user, command = self._static[pid]
            if self._proc_readable:
                reading = self._times.read(pid)
                if reading is None:  # gone since the GPU listed it, or hidden from us
                    raise psutil.NoSuchProcess(pid)
                cpu_pct, rss_bytes = reading
            else:
                cpu_pct, rss_bytes = self._psutil_reading(pid)
            return ProcessSample(pid=pid, name=name, user=user, cpu_pct=cpu_pct, rss_bytes=rss_bytes, command=command)
        except (psutil.Error, OSError):  # gone, another user's, or in a container we can't see into
            self._processes.pop(pid, None)
            self._static.pop(pid, None)
            return ProcessSample(pid=pid, name=None, user=None, cpu_pct=None, rss_bytes=None, command=None)

    def _psutil_reading(self, pid: int) -> tuple[float | None, int]:
        process = self._processes.get(pid)
        if process is None:
            process = self._processes[pid] = psutil.Process(pid)
            process.cpu_percent()  # prime
        with process.oneshot():
            return process.cpu_percent(), process.memory_info().rss
