"""A process's CPU share and RSS read from /proc (gpumix/hw/process_times.py) as psutil reads them: the
share by psutil's formula over a written /proc (exact values), the fields at the places psutil reads them
on this machine's own /proc, and hostile names, reused PIDs and unreadable files handled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from gpumix.hw.host import HostSampler
from gpumix.hw.process_times import ProcessTimes, stat_times

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
CPUS = os.cpu_count() or 1


class Timer:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def write(proc: Path, pid: int, name: str, user_ticks: int, system_ticks: int, start: int, resident: int) -> None:
    folder = proc / str(pid)
    folder.mkdir(parents=True, exist_ok=True)
    # fields 3-52 of a real line: state, ppid ... utime (14), stime (15) ... starttime (22) ...
    rest = ["S", "1", "1", "1", "0", "-1", "4194560", "100", "0", "0", "0", str(user_ticks), str(system_ticks),
            "0", "0", "20", "0", "1", "0", str(start), "1000000", "999999"] + ["0"] * 30
    (folder / "stat").write_bytes(f"{pid} ({name}) ".encode() + " ".join(rest).encode() + b"\n")
    (folder / "statm").write_bytes(f"5000 {resident} 300 10 0 900 0\n".encode())


def psutil_share(user_s: float, system_s: float, seconds: float) -> float:
    """psutil.Process.cpu_percent's arithmetic for these deltas (its timer counts every CPU)."""
    return round((user_s + system_s) / (seconds * CPUS) * 100 * CPUS, 1)


def test_shares_and_rss_from_a_written_proc(tmp_path: Path) -> None:
    timer = Timer()
    times = ProcessTimes(proc=str(tmp_path), timer=timer)
    write(tmp_path, 41, "python", 1000, 200, start=555, resident=2500)
    write(tmp_path, 42, "a) (b c) 9 9 9", 50, 0, start=777, resident=10)  # a name meant to shift the fields
    assert times.read(41) == (None, 2500 * PAGE)  # the first reading: nothing to compare with
    assert times.read(42) == (None, 10 * PAGE)
    timer.now_s += 2.0
    write(tmp_path, 41, "python", 1000 + TICKS * 1, 200 + TICKS // 2, start=555, resident=2600)  # 1.5 s busy in 2 s
    write(tmp_path, 42, "a) (b c) 9 9 9", 50 + TICKS // 4, 0, start=777, resident=10)
    assert times.read(41) == (psutil_share(1.0, 0.5, 2.0), 2600 * PAGE) == (75.0, 2600 * PAGE)
    assert times.read(42) == (12.5, 10 * PAGE)
    timer.now_s += 1.0
    write(tmp_path, 41, "python", 5, 5, start=999, resident=100)  # the PID now another process's
    assert times.read(41) == (None, 100 * PAGE)
    (tmp_path / "42" / "statm").write_bytes(b"garbage")
    assert times.read(42) is None
    assert times.read(43) is None  # no such process
    times.keep_only({41})
    write(tmp_path, 42, "back", 0, 0, start=777, resident=1)
    assert times.read(42) == (None, PAGE)  # forgotten: a first reading again


def test_the_fields_are_where_psutil_reads_them_on_this_machine() -> None:
    if not ProcessTimes().available():
        pytest.fail("this test needs Linux's /proc")  # CI runs on Linux: a missing /proc is a failure, not a skip
    child = subprocess.Popen([sys.executable, "-c", "import sys; sum(range(3_000_000)); print('asleep', flush=True); "
                              "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"asleep\n"  # it waits on its stdin now
        process = psutil.Process(child.pid)
        times = ProcessTimes()
        before = process.cpu_times()
        share, rss = times.read(child.pid)  # type: ignore[misc]
        assert share is None and before.user + before.system > 0
        assert rss == process.memory_info().rss  # a sleeping process's pages: the same count
        user_s, system_s, _ = stat_times(Path(f"/proc/{child.pid}/stat").read_bytes(), TICKS)
        assert (user_s, system_s) == (before.user, before.system)
        assert times.read(child.pid)[0] == 0.0  # type: ignore[index]  # asleep since
    finally:
        child.kill()
        child.wait()
    assert times.read(child.pid) is None


def test_the_host_sampler_reads_a_process_through_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    sampler = HostSampler()
    calls: list[int] = []
    real_reading = sampler._psutil_reading
    monkeypatch.setattr(sampler, "_psutil_reading", lambda pid: calls.append(pid) or real_reading(pid))
    first = sampler.processes({os.getpid()})[os.getpid()]
    second = sampler.processes({os.getpid()})[os.getpid()]
    assert first.name == psutil.Process().name() and first.cpu_pct is None
    assert second.cpu_pct is not None and second.rss_bytes and second.rss_bytes > 0
    assert calls == []  # psutil read the name once, never the CPU or the memory
    gone = sampler.processes({2**22 + 12345})  # above pid_max's default: no such process
    assert gone[2**22 + 12345].name is None and gone[2**22 + 12345].rss_bytes is None
