"""The host's CPU busy share per core since the last reading, as `psutil.cpu_percent(percpu=True)` gives it,
bit for bit (tests/test_host_core_percents_s10.py), from one read of /proc/stat.

psutil makes a named tuple of every core's times and then ~50 Python calls a core to compare two readings
(a getattr, a max and an append per field): ~280 calls a tick on a 2-core box, more on a many-core GPU host
(issue 13: the hub at <= 0.5 % of a core). Here a core's comparison is one list and a sum. The arithmetic is
psutil's, in its order (deltas clamped at 0, the total less guest and guest_nice, busy the total less idle
and iowait, the share rounded to 0.1), so the figures are the same floats.

Unlike psutil's, the previous reading is this object's, not the calling thread's: a hub primed on one thread
and sampled on another compares with its own priming, not with nothing (psutil gave 0.0 there, once).

What it may import: psutil (the field layout psutil reads; its reading where /proc/stat cannot be read).
"""

from __future__ import annotations

import os

import psutil

PROC_STAT = "/proc/stat"


class CorePercents:
    """`percents()`: each core's busy share in % since the last call (or since it was made)."""

    def __init__(self, path: str = PROC_STAT) -> None:
        self._path = path
        fields = psutil.cpu_times()._fields  # the layout psutil reads /proc/stat with (10 fields on Linux 3.2+)
        self._count = len(fields)
        self._idle = fields.index("idle")
        self._iowait = fields.index("iowait") if "iowait" in fields else None
        self._guests = [fields.index(name) for name in ("guest", "guest_nice") if name in fields]
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last = self._read()
        self._psutil = self._last is None
        if self._psutil:  # not Linux, or no /proc: psutil reads, primed now as before
            psutil.cpu_percent(percpu=True)

    def _read(self) -> list[list[float]] | None:
        """Every core's times in seconds, as psutil's per_cpu_times reads them (the first, all-core line skipped)."""
        count, ticks = self._count, self._ticks
        try:
            with open(self._path, "rb") as file:
                file.readline()
                cores = [[float(x) / ticks for x in line.split()[1:count + 1]] for line in file if line.startswith(b"cpu")]
        except (OSError, ValueError):
            return None
        if any(len(core) != count for core in cores):  # psutil would not read this file either
            return None
        return cores

    def percents(self) -> list[float]:
        if self._psutil:
            return psutil.cpu_percent(percpu=True)
        now = self._read()
        last = self._last
        if now is None or last is None:  # /proc/stat went unreadable: psutil from now on
            self._psutil = True
            return psutil.cpu_percent(percpu=True)
        self._last = now
        idle, iowait, guests = self._idle, self._iowait, self._guests
        shares = []
        for before, after in zip(last, now, strict=False):  # a core gone or added: as psutil, the common ones
            deltas = [b - a if b > a else 0 for a, b in zip(before, after, strict=True)]  # psutil: max(0, delta), an int 0 too
            total = sum(deltas)
            for guest in guests:
                total -= deltas[guest]
            busy = total - deltas[idle]
            if iowait is not None:
                busy -= deltas[iowait]
            shares.append(round((busy / total) * 100, 1) if total else 0.0)
        return shares
