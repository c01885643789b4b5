"""The host's CPU per core from one read of /proc/stat (gpumix/hw/core_percents.py, session 10, issue 13) is
bit for bit what psutil.cpu_percent(percpu=True) says between the same two readings: psutil itself is the
reference, reading the same files (psutil.PROCFS_PATH), on random counters that rise, stand still, fall
(psutil clamps at 0), are all idle or never move."""

from __future__ import annotations

import random
from pathlib import Path

import psutil
import pytest

from gpumix.hw.core_percents import CorePercents
from gpumix.hw.host import HostSampler

FIELDS = len(psutil.cpu_times()._fields)


def _stat_text(cores: list[list[int]]) -> str:
    total = [sum(column) for column in zip(*cores, strict=True)]
    lines = ["cpu  " + " ".join(map(str, total))]
    lines += [f"cpu{index} " + " ".join(map(str, times)) for index, times in enumerate(cores)]
    return "\n".join([*lines, "intr 12345 0 0", "ctxt 999", "btime 1700000000", "processes 10", ""])


def _next(rng: random.Random, cores: list[list[int]]) -> list[list[int]]:
    moved = []
    for times in cores:
        kind = rng.random()
        if kind < 0.1:
            moved.append(list(times))  # a core that did not move: psutil says 0.0
        elif kind < 0.2:
            moved.append([max(0, t - rng.randrange(0, 50)) for t in times])  # counters that went back
        else:
            moved.append([t + rng.choice([0, 0, rng.randrange(1, 40), rng.randrange(1, 10**6)]) for t in times])
    return moved


def test_core_percents_are_psutil_s_bit_for_bit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))
    stat = tmp_path / "stat"
    for seed in range(40):
        rng = random.Random(seed)
        cores = [[rng.randrange(0, 10**9) for _ in range(FIELDS)] for _ in range(rng.choice([1, 2, 7, 64]))]
        stat.write_text(_stat_text(cores))
        monkeypatch.setattr(psutil, "_last_per_cpu_times", {})  # psutil's previous reading, per thread
        psutil.cpu_percent(percpu=True)
        ours = CorePercents(str(stat))
        for _ in range(6):
            cores = _next(rng, cores)
            stat.write_text(_stat_text(cores))
            expected = psutil.cpu_percent(percpu=True)
            got = ours.percents()
            assert got == expected
            assert [type(x) for x in got] == [type(x) for x in expected]


def test_an_unreadable_stat_falls_back_to_psutil(tmp_path: Path) -> None:
    gone = CorePercents(str(tmp_path / "absent"))
    shares = gone.percents()
    assert len(shares) == psutil.cpu_count() and all(0.0 <= share <= 100.0 for share in shares)
    odd = tmp_path / "stat"
    odd.write_text("cpu  1 2 3\ncpu0 1 2 3\n")  # fewer fields than psutil reads: psutil's own answer
    assert len(CorePercents(str(odd)).percents()) == psutil.cpu_count()


def test_the_host_sample_reads_the_cores_without_psutil_s_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    sampler = HostSampler()

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("psutil.cpu_percent asked on Linux")

    monkeypatch.setattr(psutil, "cpu_percent", refused)
    sample = sampler.sample()
    assert len(sample.cpu_per_core_pct) == psutil.cpu_count()
    assert sample.cpu_pct == sum(sample.cpu_per_core_pct) / len(sample.cpu_per_core_pct)


def _old_memory_bytes(meminfo: str) -> tuple[int, int, int, int] | None:
    """gpumix/hw/host.py's memory_bytes before session 10 (a partition per line)."""
    try:
        with open(meminfo, encoding="ascii") as file:
            fields = {name: int(rest.split()[0]) * 1024 for name, _, rest in (line.partition(":") for line in file)
                      if name in ("MemTotal", "MemAvailable", "MemFree", "SwapTotal", "SwapFree")}
    except (OSError, ValueError, IndexError):
        return None
    if not {"MemTotal", "MemAvailable", "SwapTotal", "SwapFree"} <= fields.keys():
        return None
    total, available = fields["MemTotal"], fields["MemAvailable"]
    if available > total:
        available = fields.get("MemFree", total)
    swap_total = fields["SwapTotal"]
    swap_used = swap_total - fields["SwapFree"]
    return (min(max(total - available, 0), total), total, min(max(swap_used, 0), swap_total), swap_total)


def test_memory_from_one_regex_is_the_line_by_line_reading(tmp_path: Path) -> None:
    from gpumix.hw.host import memory_bytes

    names = ["MemTotal", "MemFree", "MemAvailable", "SwapTotal", "SwapFree", "Buffers", "MemTotalX", "xMemFree",
             "HugePages_Total", "SwapCached"]
    tails = [": {n} kB", ":{n} kB", ":   {n}", ": {n}", ":", ": kB", ": -{n} kB", ": {n}x kB", "", " : {n} kB",
             ": {n} kB : 3", ":\t{n}\tkB"]
    meminfo = tmp_path / "meminfo"
    real = Path("/proc/meminfo").read_text(encoding="ascii")
    assert memory_bytes(str(Path("/proc/meminfo"))) is not None
    for seed in range(600):
        rng = random.Random(seed)
        lines = real.splitlines() if seed % 5 == 0 else []
        for _ in range(rng.randrange(0, 12)):
            tail = rng.choice(tails[:4]) if rng.random() < 0.7 else rng.choice(tails)
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(names) + tail.format(n=rng.randrange(0, 10**9)))
        text = "\n".join(lines) + rng.choice(["\n", "", "\r\n", "\n\n"])
        meminfo.write_text(text, encoding="ascii")
        assert memory_bytes(str(meminfo)) == _old_memory_bytes(str(meminfo)), text
    meminfo.write_bytes(b"MemTotal: 10 kB\nMemAvailable: \xff kB\n")
    assert memory_bytes(str(meminfo)) is None is _old_memory_bytes(str(meminfo))
