"""The host's memory from one read of /proc/meminfo (gpumix/hw/host.py): what psutil says, without
psutil.swap_memory's read of /proc/vmstat each tick (issue 13); None where the file cannot say."""

from __future__ import annotations

from pathlib import Path

import psutil

from gpumix.hw.host import HostSampler, memory_bytes

SLACK_BYTES = 256 << 20  # the box's memory moves between two reads


def test_memory_is_what_psutil_says() -> None:
    ours = memory_bytes()
    virtual, swap = psutil.virtual_memory(), psutil.swap_memory()
    assert ours is not None
    used, total, swap_used, swap_total = ours
    assert total == virtual.total and swap_total == swap.total
    assert abs(used - (virtual.total - virtual.available)) < SLACK_BYTES
    assert abs(swap_used - swap.used) < SLACK_BYTES
    sample = HostSampler().sample()
    assert sample.mem_total_bytes == virtual.total and sample.swap_total_bytes == swap.total


def test_a_meminfo_without_available_memory_says_nothing(tmp_path: Path) -> None:
    old_kernel = tmp_path / "meminfo"
    old_kernel.write_text("MemTotal:  1000 kB\nMemFree:  10 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
    assert memory_bytes(str(old_kernel)) is None  # psutil's estimate then (HostSampler falls back)
    assert memory_bytes(str(tmp_path / "absent")) is None
    full = tmp_path / "full"
    full.write_text("MemTotal: 1000 kB\nMemAvailable: 600 kB\nSwapTotal: 200 kB\nSwapFree: 50 kB\nHugePages_Total: 0\n")
    assert memory_bytes(str(full)) == (400 * 1024, 1000 * 1024, 150 * 1024, 200 * 1024)


def test_a_container_view_with_more_available_than_total_takes_free_memory(tmp_path: Path) -> None:
    # an LXCFS view can say MemAvailable > MemTotal: used would go negative; psutil takes MemFree then
    lxc = tmp_path / "meminfo"
    lxc.write_text("MemTotal: 1000000 kB\nMemFree: 200000 kB\nMemAvailable: 3000000 kB\n"
                   "SwapTotal: 100 kB\nSwapFree: 400 kB\n")
    used, total, swap_used, swap_total = memory_bytes(str(lxc))
    assert (used, total) == (800000 * 1024, 1000000 * 1024)
    assert (swap_used, swap_total) == (0, 100 * 1024)  # never negative either
