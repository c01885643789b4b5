"""While no dashboard views the hub, a busy GPU's PCIe counters are read on the slow schedule (issue 13):
a busy fast link's pair of counter reads is about 1 ms of CPU a tick on an H100, most of what a busy GPU
costs the hub, for rates no one looks at; each read that finds the same processes at work doubles the wait
(5, 10, 20, then 30 s; session 22). A dashboard (gpumix-top with its own hub, or attached: its
snapshot requests say "view") brings back a pair every tick. Counted on the NVML look-alike and over a
real socket."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from gpumix.hub.client import HubClient
from gpumix.hub.core import VIEWER_HOLD_S, Hub
from gpumix.hub.server import HubServer
from gpumix.hw.hardware import Hardware
from gpumix.record.recorder import Recorder
from gpumix.sim.machine import GpuActivity
from gpumix.tui.app import GpumixApp
from tests.call_counts import count_calls
from tests.conftest import FixedHostSampler, ManualClock, ticked_hub
from tests.test_pcie_guard_costs import FAST, GPU, World

SLOW_S = 5  # the backend's slow interval, in 1 s ticks


@pytest.fixture
def unviewed() -> Any:
    made = World(exact_pcie=False)
    made.backend.busy_on_slow_schedule = True
    yield made
    made.backend.close()


def _busy(world: World, tx: float = FAST, rx: float = FAST / 2, pids: tuple[int, ...] = (4242,)) -> None:
    """At work: `pids` listed, each with 2 GiB of the GPU's memory (a process that joins moves it)."""
    world.machine.set_activity(GPU, GpuActivity(busy_fraction=1.0, util_pct=100.0, pcie_tx_bytes_per_s=tx,
                                                pcie_rx_bytes_per_s=rx, pids=list(pids), mem_used_bytes=len(pids) << 31))


def _started(world: World) -> int:
    """Busy, past its first readings; the counter reads so far."""
    _busy(world)
    world.tick()
    world.one_tick_with_the_guard()
    return world.nvml.field_reads[GPU]


def _ticks_read(world: World, ticks: int) -> list[int]:
    """The ticks, of the next `ticks`, at which the GPU's counters were read."""
    read_at = []
    for tick in range(1, ticks + 1):
        reads = world.nvml.field_reads[GPU]
        world.one_tick_with_the_guard()
        if world.nvml.field_reads[GPU] > reads:
            read_at.append(tick)
    return read_at


def test_a_busy_fast_link_takes_its_pair_once_a_slow_interval_and_carries_its_rates_between(unviewed: World) -> None:
    world = unviewed
    reads = _started(world)
    for _ in range(SLOW_S):
        busy = world.one_tick_with_the_guard()[GPU]
        assert busy.pcie_tx_bytes_per_s == pytest.approx(FAST, rel=1e-6)
        assert busy.pcie_rx_bytes_per_s == pytest.approx(FAST / 2, rel=1e-6)
    assert world.nvml.field_reads[GPU] - reads == 2  # one pair in five ticks, not five
    assert world.nvml.window_reads[GPU] == 0


def test_each_read_that_finds_the_same_processes_at_work_doubles_the_wait_up_to_30_s(unviewed: World) -> None:
    world = unviewed
    reads = _started(world)
    read_at = _ticks_read(world, 100)
    gaps = [later - earlier for earlier, later in zip([0] + read_at[:-1], read_at, strict=True)]
    assert gaps == [5, 10, 20, 30, 30], read_at
    assert world.nvml.field_reads[GPU] == reads + 2 * len(read_at)  # each read a pair


def test_a_gpu_whose_processes_change_is_read_that_tick_and_waits_5_s_again(unviewed: World) -> None:
    world = unviewed
    _started(world)
    _ticks_read(world, 15)  # read at 5 and 15: the next in 20 s
    _busy(world, tx=FAST / 4, pids=(4242, 777))  # another job joins: its memory moves, its process is listed
    changed = world.one_tick_with_the_guard()[GPU]
    assert [process.pid for process in changed.processes] == [4242, 777]
    assert changed.pcie_tx_bytes_per_s == pytest.approx(FAST / 4, rel=1e-6)  # read, a pair
    assert _ticks_read(world, 6) == [5]  # back on the slow interval


def test_the_pair_after_carried_ticks_gives_the_rate_now_not_the_carried_one(unviewed: World) -> None:
    world = unviewed
    _started(world)
    world.one_tick_with_the_guard()
    _busy(world, tx=FAST / 4, rx=FAST / 8)  # the traffic changes while the GPU keeps working
    seen = [world.one_tick_with_the_guard()[GPU].pcie_tx_bytes_per_s for _ in range(SLOW_S)]
    assert seen[-1] == pytest.approx(FAST / 4, rel=1e-6)  # the due read: a pair, not the aliased 5 s step
    assert seen[0] == pytest.approx(FAST, rel=1e-6)  # carried until then


def test_a_gpu_whose_work_stops_is_read_that_tick(unviewed: World) -> None:
    world = unviewed
    reads = _started(world)
    world.one_tick_with_the_guard()  # carried
    assert world.nvml.field_reads[GPU] == reads
    world.machine.set_activity(GPU, GpuActivity())
    stopped = world.one_tick_with_the_guard()[GPU]
    assert world.nvml.field_reads[GPU] == reads + 2  # a pair: the step since the last read may hide wraps
    assert stopped.pcie_tx_bytes_per_s == 0.0 and stopped.pcie_rx_bytes_per_s == 0.0


def test_a_gpu_whose_link_retrains_is_read_that_tick(unviewed: World) -> None:
    world = unviewed
    reads = _started(world)
    world.nvml.nvmlDeviceGetCurrPcieLinkGeneration = lambda handle: 1  # type: ignore[method-assign]
    world.one_tick_with_the_guard()
    assert world.nvml.field_reads[GPU] > reads


def test_viewed_again_a_busy_fast_link_takes_a_pair_every_tick(unviewed: World) -> None:
    world = unviewed
    _started(world)
    world.one_tick_with_the_guard()
    world.backend.busy_on_slow_schedule = False
    reads = world.nvml.field_reads[GPU]
    for _ in range(3):
        world.one_tick_with_the_guard()
    assert world.nvml.field_reads[GPU] - reads == 3 * 2


def test_exact_totals_asked_for_keep_the_guard_unviewed_too() -> None:
    world = World(exact_pcie=True)
    world.backend.busy_on_slow_schedule = True
    try:
        reads = _started(world)
        world.one_tick_with_the_guard()
        assert world.nvml.field_reads[GPU] - reads >= 7  # a 4.29 GB counter at 20 GB/s: a read every 0.2 s
    finally:
        world.backend.close()


PCIE_CALLS = ("nvmlDeviceGetFieldValues", "nvmlDeviceGetPcieThroughput")  # counter reads, 20 ms windows


def _hub(hardware: Hardware, clock: ManualClock) -> Hub:
    return Hub(hardware, host_sampler=FixedHostSampler(), clock=clock, wall_clock=lambda: 1_764_500_000.0 + clock())


@contextmanager
def _served(hub: Hub) -> Iterator[str]:
    """The hub served on a Unix socket of its own for the block; the socket's path."""
    path = f"/tmp/gpumix-unviewed-{id(hub)}.sock"
    server = HubServer(hub, path)
    server.start()
    try:
        yield path
    finally:
        server.stop()


def _pcie_calls_over(hub: Hub, clock: ManualClock, calls: Counter[str], ticks: int, view: bool = False) -> int:
    before = calls.total()
    for _ in range(ticks):
        if view:  # a dashboard asks each refresh
            hub.note_viewer()
        hub.tick()
        clock.advance(1.0)
    return calls.total() - before


def test_a_hub_no_one_views_reads_the_demo_rigs_busy_gpus_on_the_slow_schedule(demo_hardware: Hardware,
                                                                                clock: ManualClock) -> None:
    hub = _hub(demo_hardware, clock)
    calls = count_calls(demo_hardware.backend._nvml, PCIE_CALLS)
    _pcie_calls_over(hub, clock, calls, 3)  # the first readings
    unviewed = _pcie_calls_over(hub, clock, calls, 10)
    viewed = _pcie_calls_over(hub, clock, calls, 10, view=True)
    assert viewed > 0 and unviewed <= viewed * 0.4, (unviewed, viewed)
    assert hub.viewed()
    clock.advance(VIEWER_HOLD_S - 1.0)
    assert not hub.viewed()  # the dashboard stopped asking VIEWER_HOLD_S ago
    assert _pcie_calls_over(hub, clock, calls, 10) <= viewed * 0.4
    hub.viewing = True  # gpumix-top with its own hub
    assert hub.viewed()


def test_a_dashboards_client_asks_to_view_over_the_socket_and_a_one_shots_does_not(demo_hardware: Hardware,
                                                                                    clock: ManualClock) -> None:
    hub = _hub(demo_hardware, clock)
    hub.tick()
    with _served(hub) as path:
        one_shot = HubClient(path)
        assert one_shot.snapshot() is not None
        assert not hub.viewed()
        dashboard = HubClient(path)
        GpumixApp(dashboard)  # the app marks its source a viewer
        assert dashboard.snapshot() is not None
        assert hub.viewed()
        one_shot.close()
        dashboard.close()


def test_gpumix_top_with_its_own_hub_views_it(demo_hardware: Hardware, clock: ManualClock) -> None:
    hub = _hub(demo_hardware, clock)
    assert not hub.viewed()
    GpumixApp(hub)
    assert hub.viewed()
    hub.tick()
    assert demo_hardware.backend.busy_on_slow_schedule is False


def test_a_hub_that_records_reads_as_for_a_dashboard(demo_hardware: Hardware, clock: ManualClock, tmp_path: Any) -> None:
    """A recording is viewed later, as the dashboard a replay is: its PCIe rates are each tick's."""
    hub = _hub(demo_hardware, clock)
    recorder = Recorder(tmp_path / "rec.sqlite").attach(hub)
    try:
        assert hub.viewed()
    finally:
        recorder.close()


def test_a_carried_rate_says_how_old_it_is_and_a_read_one_says_0(unviewed: World) -> None:
    world = unviewed
    _started(world)
    ages = [world.one_tick_with_the_guard()[GPU].pcie_rates_age_s for _ in range(2 * SLOW_S)]
    # carried 1-4 s after the pair that _started read (ticks 1 s apart, after its 20 ms), then read again,
    # then carried up to 10 s (the same process still at work)
    assert ages[:SLOW_S] == pytest.approx([1.0, 2.0, 3.0, 4.0, 0.0])
    assert ages[SLOW_S:] == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0])
    world.backend.busy_on_slow_schedule = False
    assert world.one_tick_with_the_guard()[GPU].pcie_rates_age_s == 0.0


def test_a_quiet_gpus_carried_rate_says_how_old_it_is() -> None:
    world = World(exact_pcie=False)
    try:
        world.tick()
        ages = [world.one_tick_with_the_guard()[GPU].pcie_rates_age_s for _ in range(7)]
        # the first rates (a pair) say idle: carried unread 1-4 s, read at the slow interval (5 s), carried again
        assert ages == pytest.approx([0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 1.0])
    finally:
        world.backend.close()


def _carried_busy(snapshot: dict[str, Any]) -> list[int]:
    """The GPUs at work whose PCIe rates are older than a tick (carried on the slow schedule)."""
    return [gpu["index"] for gpu in snapshot["gpus"]
            if (gpu["util_gpu_pct"] or 0) > 0 and (gpu["pcie_rates_age_s"] or 0) > 1.0]


def test_a_one_shots_client_gets_busy_gpus_pcie_read_now_and_asking_again_costs_no_second_read(
        demo_hardware: Hardware, clock: ManualClock) -> None:
    hub = ticked_hub(demo_hardware, clock, ticks=10)  # no dashboard: busy GPUs' rates carried, 3 s old now
    with _served(hub) as path:
        calls = count_calls(demo_hardware.backend._nvml, PCIE_CALLS)
        plain = HubClient(path)
        carried = _carried_busy(plain.snapshot())
        assert carried and calls.total() == 0  # a script's plain ask takes what the last tick carried
        one_shot = HubClient(path)
        one_shot.fresh = True  # gpumix-top --once, doctor, power show
        fresh = one_shot.snapshot()
        assert _carried_busy(fresh) == []
        assert all(fresh["gpus"][index]["pcie_rates_age_s"] == 0.0 for index in carried)
        reads = calls.total()
        assert reads > 0
        assert _carried_busy(one_shot.snapshot()) == [] and calls.total() == reads  # now fresh: no second tick
        assert not hub.viewed()  # a one-shot is no dashboard: the slow schedule goes on
        plain.close()
        one_shot.close()


def test_a_fresh_reading_that_fails_answers_with_the_last_snapshot(demo_hardware: Hardware, clock: ManualClock,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    hub = ticked_hub(demo_hardware, clock, ticks=10)
    last = hub.snapshot()
    assert last is not None and _carried_busy(last)

    def failing_tick(viewed: bool = False) -> dict[str, Any]:
        raise RuntimeError("NVML went away")

    monkeypatch.setattr(hub, "tick", failing_tick)
    with _served(hub) as path:
        one_shot = HubClient(path)
        one_shot.fresh = True
        answered = one_shot.snapshot()
        assert answered is not None and answered["timestamp_s"] == last["timestamp_s"]
        assert one_shot.snapshot() is not None  # the connection stays
        one_shot.close()
