"""A process's CPU share and resident memory as psutil gives them (`Process.cpu_percent()` and
`memory_info().rss`), from one read of /proc/PID/stat and one of /proc/PID/statm, without psutil's objects.

The hub reads every process on a GPU each tick: ten processes cost it 1.39 ms a tick through psutil on the
2-core box (an object, a oneshot cache and two reads each), 0.74 ms here; 0.98 against 0.57 ms on an H100
(benchmarks/process_reading_cost.py; issue 13: the hub at <= 0.5 % of a core). The arithmetic is
psutil's, in its order: user and system time since the last reading over the monotonic time since,
times 100 (so 100 is one core), rounded to 0.1. RSS is statm's resident pages, as psutil reads it;
/proc/PID/stat's own rss field is the kernel's approximate per-CPU count, off by pages. A PID whose
start time changed is another process: its first reading again. The first reading of a process has
nothing to compare with: its share is None (psutil says 0.0 there).

What it may import: nothing of gpumix.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

PROC = "/proc"
STAT_MAX_BYTES = 4096  # a stat line is ~300 bytes; a name is at most 64 (TASK_COMM_LEN is 16 today)


class ProcessTimes:
    """`read(pid)`: (CPU % of one core since this object's last reading of it, or None at its first;
    resident bytes), or None where /proc cannot say (gone, another namespace, not Linux)."""

    def __init__(self, proc: str = PROC, timer: Callable[[], float] = time.monotonic) -> None:
        self._proc = proc
        self._timer = timer
        self._clock_ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._page_bytes = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._cpus = os.cpu_count() or 1  # psutil's timer counts every CPU's time; the share multiplies it back
        self._last: dict[int, tuple[bytes, float, float, float]] = {}  # pid -> (start time, user s, system s, timer)

    def available(self) -> bool:
        return os.path.isfile(os.path.join(self._proc, "self", "stat"))

    def read(self, pid: int) -> tuple[float | None, int] | None:
        try:
            with open(f"{self._proc}/{pid}/stat", "rb") as file:
                stat = file.read(STAT_MAX_BYTES)
            with open(f"{self._proc}/{pid}/statm", "rb") as file:
                resident_pages = int(file.read(256).split()[1])
            user_s, system_s, started = stat_times(stat, self._clock_ticks)
        except (OSError, ValueError, IndexError):
            self._last.pop(pid, None)
            return None
        now = self._timer() * self._cpus
        last = self._last.get(pid)
        self._last[pid] = (started, user_s, system_s, now)
        share = None
        if last is not None and last[0] == started:
            busy_s, elapsed = (user_s - last[1]) + (system_s - last[2]), now - last[3]
            share = round(busy_s / elapsed * 100 * self._cpus, 1) if elapsed > 0 else 0.0
        return share, resident_pages * self._page_bytes

    def keep_only(self, pids: Iterable[int]) -> None:
        """Forget the processes not in `pids` (gone from the GPUs): the map stays as long as the list."""
        kept = set(pids)
        for pid in [pid for pid in self._last if pid not in kept]:
            del self._last[pid]


def stat_times(stat: bytes, clock_ticks: int) -> tuple[float, float, bytes]:
    """(user s, system s, start time as written) from a /proc/PID/stat line, as psutil reads them."""
    # the name (field 2) is in parentheses and may hold spaces and parentheses: count from the last ")"
    fields = stat[stat.rindex(b")") + 2:].split()
    return int(fields[11]) / clock_ticks, int(fields[12]) / clock_ticks, fields[19]  # utime, stime, starttime
