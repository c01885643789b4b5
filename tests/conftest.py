"""Shared fixtures: a manual clock, the simulated rig, and a hub on a fixed host."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.hub.server import HubServer
from gpumix.hw.hardware import Hardware
from gpumix.hw.host import HostSample, HostSampler, ProcessSample
from gpumix.sim.rig import load_builtin_rig
from tests.skips import ALLOWED_SKIPS, unlisted
from tests.waiting import wait_until  # noqa: F401  (re-exported: tests import it from here too)

_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A skip not listed in tests/skips.py fails the run: it would hide a missing package or a bug."""
    bad = unlisted(_skipped)
    if bad:
        print(f"\nunlisted skips (list them with a reason in tests/skips.py, or fix them): {bad}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_report_header() -> str:
    return f"allowed skips: {len(ALLOWED_SKIPS)} (tests/skips.py)"


class ManualClock:
    """Time that moves only when the test says so."""

    def __init__(self, start_s: float = 1_000.0) -> None:
        self.now_s = start_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


class FixedHostSampler(HostSampler):
    """The simulated rig's host: fixed readings, so screens are deterministic."""

    def __init__(self) -> None:
        pass

    def sample(self) -> HostSample:
        return HostSample(
            cpu_pct=37.5,
            cpu_per_core_pct=[10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 20.0],
            mem_used_bytes=48 * 1024**3,
            mem_total_bytes=128 * 1024**3,
            swap_used_bytes=0,
            swap_total_bytes=8 * 1024**3,
            load_avg=[6.5, 6.1, 5.9],
        )

    def processes(self, pids: set[int]) -> dict[int, ProcessSample]:
        return {
            pid: ProcessSample(pid=pid, name="python", user="trainer", cpu_pct=98.0, rss_bytes=3 * 1024**3, command="python train.py")
            for pid in pids
        }


@pytest.fixture(autouse=True)
def private_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The power audit log and runtime sockets of a test never touch the real home. Agents send every
    0.1 s (the default is 1 s: tests that wait for steps at a hub would wait up to a second more each);
    tests of the default period unset it (tests/test_agent_send_period.py)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", "0.1")


@pytest.fixture
def tui_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Screens as in the snapshots: UTC clock, no user themes, colour allowed."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def demo_hardware(clock: ManualClock) -> Hardware:
    return simulated_hardware(load_builtin_rig("mixed-10"), clock=clock, wall_clock=lambda: 1_764_500_000.0 + clock())


def ticked_hub(hardware: Hardware, clock: ManualClock, ticks: int = 3, interval_s: float = 1.0) -> Hub:
    """A hub sampled `ticks` times, `interval_s` apart, on the manual clock (no thread)."""
    hub = Hub(hardware, interval_s=interval_s, host_sampler=FixedHostSampler(), clock=clock,
              wall_clock=lambda: 1_764_500_000.0 + clock(), hostname="rig01")
    for _ in range(ticks):
        hub.tick()
        clock.advance(interval_s)
    return hub


@pytest.fixture
def demo_hub(demo_hardware: Hardware, clock: ManualClock) -> Hub:
    return ticked_hub(demo_hardware, clock)


@pytest.fixture
def hub_socket(demo_hardware: Hardware, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Hub, str]]:
    """A hub on the demo rig, served on a Unix socket (for supervisors and real training jobs)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    hub = Hub(demo_hardware)
    hub.tick()
    path = f"/tmp/gpumix-restart-{os.getpid()}.sock"
    server = HubServer(hub, path)
    server.start()
    yield hub, path
    server.stop()
