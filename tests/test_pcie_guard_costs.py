"""The PCIe wrap guard reads only GPUs that may be moving data (issue 13): an idle card whose link
stays fast (an H200 keeps gen5 x16 at idle) costs one counter read per slow interval (5 s, then longer
while it stays quiet, up to 30 s), not one per wrap period nor one per tick; a busy one is still read often
enough to stay exact; one that wakes between two ticks gives no rate for that tick rather than an aliased
one. Calls are counted on the NVML look-alike.

The guard runs with `exact_pcie` (the `world` fixture). By default (`window_world`) a busy GPU whose
link can wrap within a tick costs no guard reads at all: its rate comes from a second counter read
20 ms after the tick's (two reads a tick; the guard was 1.4 % of a core per busy H200, and
nvmlDeviceGetPcieThroughput's 20 ms window 3.4 ms of CPU a tick), the window only where the pair
cannot answer."""

from __future__ import annotations

import threading
from collections import Counter
from itertools import pairwise
from typing import Any

import pynvml
import pytest

from gpumix.hw.nvml_backend import NvmlBackend
from gpumix.hw.nvml_pcie import MOVING_BYTES_PER_S, QUIET_READ_MAX_S, quiet_read_wait_s
from gpumix.hw.pcie_counters import PCIE_GUARD_MAX_WAIT_S
from gpumix.sim.machine import IDLE_MEM_BYTES, GpuActivity, SimMachine
from gpumix.sim.nvml import SimHandle, SimNvml
from gpumix.sim.rig import load_builtin_rig
from tests.conftest import ManualClock

GPU = 7  # an RTX 4090: gen4 x16, a 4.29 GB counter can wrap every 0.136 s at the link's rate
FAST = 20e9  # bytes/s: four wraps a second
TICK_S = 1.0


class FastIdleLinkNvml(SimNvml):
    """Links stay at their max generation at idle (as an H200's does); counts counter reads."""

    def __init__(self, machine: SimMachine) -> None:
        super().__init__(machine)
        self.field_reads: Counter[int] = Counter()
        self.window_reads: Counter[int] = Counter()

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: SimHandle) -> int:
        super().nvmlDeviceGetCurrPcieLinkGeneration(handle)
        return self.machine.gpus[handle.index].spec.link_gen_max

    def nvmlDeviceGetFieldValues(self, handle: SimHandle, field_ids: list[int]) -> list[Any]:
        self.field_reads[handle.index] += 1
        return super().nvmlDeviceGetFieldValues(handle, field_ids)

    def nvmlDeviceGetPcieThroughput(self, handle: SimHandle, counter: int) -> int:
        self.window_reads[handle.index] += 1
        return super().nvmlDeviceGetPcieThroughput(handle, counter)


class World:
    def __init__(self, exact_pcie: bool = True) -> None:
        self.clock = ManualClock()
        self.machine = SimMachine(load_builtin_rig("mixed-10"), clock=self.clock)
        self.machine.synthetic_job = False  # every GPU idle unless a test says otherwise
        self.nvml = FastIdleLinkNvml(self.machine)
        # a pair's 20 ms between reads moves the world's clock, as the real sleep moves NVML's
        self.backend = NvmlBackend(nvml=self.nvml, clock=self.clock, wall_clock=self.clock, sleep=self.clock.advance)
        self.backend.exact_pcie = exact_pcie
        # No guard thread: the test plays the guard by calling poll_pcie_counters, so every read is counted.
        self.backend._guard_stop.set()

    def tick(self) -> list[Any]:
        self.machine.tick()
        return self.backend.sample()

    def one_tick_with_the_guard(self) -> list[Any]:
        """TICK_S of time in which the guard polls whenever it asks to, then a tick."""
        elapsed_s = 0.0
        while elapsed_s < TICK_S - 1e-9:
            step_s = min(self.backend.poll_pcie_counters(), TICK_S - elapsed_s)
            self.clock.advance(step_s)
            elapsed_s += step_s
        return self.tick()


@pytest.fixture
def world() -> Any:
    made = World()
    yield made
    made.backend.close()


@pytest.fixture
def window_world() -> Any:
    made = World(exact_pcie=False)
    yield made
    made.backend.close()


def _window_rate(bytes_per_s: float) -> float:
    """What the 20 ms window says, in bytes/s: NVML answers whole KB/s."""
    return int(bytes_per_s / 1000) * 1000.0


def test_a_busy_gpu_on_a_fast_link_takes_a_pair_of_reads_not_guard_reads_nor_the_window(window_world: World) -> None:
    world = window_world
    world.machine.set_activity(GPU, GpuActivity(busy_fraction=1.0, pcie_tx_bytes_per_s=FAST, pcie_rx_bytes_per_s=FAST / 2))
    world.tick()
    world.one_tick_with_the_guard()
    reads = world.nvml.field_reads[GPU]
    for _ in range(5):
        busy = world.one_tick_with_the_guard()[GPU]
        # 20 GB/s over a second wrapped the counter four times: the pair answers (exact bytes, not the
        # window's whole KB/s), not an aliased step
        assert busy.pcie_tx_bytes_per_s == pytest.approx(FAST, rel=1e-6)
        assert busy.pcie_rx_bytes_per_s == pytest.approx(FAST / 2, rel=1e-6)
    assert world.nvml.field_reads[GPU] - reads == 10  # two counter reads a tick; the guard read ~7 a tick
    assert world.nvml.window_reads[GPU] == 0
    assert world.backend.poll_pcie_counters() == PCIE_GUARD_MAX_WAIT_S  # nothing due
    assert world.backend._pcie_guard is None


def test_a_pair_whose_second_read_brings_nothing_newer_takes_the_window(window_world: World) -> None:
    """A driver that answered the second read with the first's timestamp (a cached value): the window."""
    world = window_world
    world.backend._sleep = lambda seconds: None  # NVML's clock does not move between the two reads
    world.machine.set_activity(GPU, GpuActivity(busy_fraction=1.0, pcie_tx_bytes_per_s=FAST, pcie_rx_bytes_per_s=FAST / 2))
    world.tick()
    world.one_tick_with_the_guard()
    windows = world.nvml.window_reads[GPU]
    for _ in range(3):
        busy = world.one_tick_with_the_guard()[GPU]
        assert busy.pcie_tx_bytes_per_s == _window_rate(FAST)
        assert busy.pcie_rx_bytes_per_s == _window_rate(FAST / 2)
    assert world.nvml.window_reads[GPU] - windows == 6  # tx + rx a tick


def test_a_pair_longer_than_a_wrap_period_takes_the_window(window_world: World) -> None:
    """Reads 0.2 s apart on a link that wraps the counters every 0.136 s could have missed a wrap."""
    world = window_world
    world.backend._sleep = lambda seconds: world.clock.advance(0.2)
    world.machine.set_activity(GPU, GpuActivity(busy_fraction=1.0, pcie_tx_bytes_per_s=FAST, pcie_rx_bytes_per_s=FAST))
    world.tick()
    world.one_tick_with_the_guard()
    busy = world.one_tick_with_the_guard()[GPU]
    assert busy.pcie_tx_bytes_per_s == _window_rate(FAST)


def test_the_pair_hands_back_to_the_counters_without_an_aliased_tick(window_world: World) -> None:
    world = window_world
    world.tick()
    world.one_tick_with_the_guard()  # no rate at first counts as busy: this tick took a pair
    world.one_tick_with_the_guard()  # idle: counters only
    started = world.nvml.field_reads[GPU]
    world.one_tick_with_the_guard()
    assert world.nvml.field_reads[GPU] == started  # quiet: no read, and no pair
    world.machine.set_activity(GPU, GpuActivity(busy_fraction=1.0, pcie_tx_bytes_per_s=FAST, pcie_rx_bytes_per_s=FAST))
    woke = world.one_tick_with_the_guard()[GPU]
    assert woke.pcie_tx_bytes_per_s == pytest.approx(FAST, rel=1e-6)  # woke unwatched: the pair, not None
    world.one_tick_with_the_guard()
    world.machine.set_activity(GPU, GpuActivity())
    # The first idle tick's counter step spans busy time that wrapped the counter: a pair answers
    calmed = world.one_tick_with_the_guard()[GPU]
    assert calmed.pcie_tx_bytes_per_s == 0.0 and calmed.pcie_rx_bytes_per_s == 0.0
    reads = world.nvml.field_reads[GPU]
    for _ in range(3):  # idle and quiet: its last exact rate carried, no pair
        idle = world.one_tick_with_the_guard()[GPU]
        assert idle.pcie_tx_bytes_per_s == 0.0
    assert world.nvml.field_reads[GPU] == reads  # quiet: carried, no read and no pair
    assert world.nvml.window_reads[GPU] == 0


def test_a_moderate_rate_on_a_slow_link_stays_on_the_counters(window_world: World) -> None:
    """3 GB/s on a link that idles at gen1 x16 cannot wrap within a tick: exact counters, no window."""
    world = window_world
    world.nvml.nvmlDeviceGetCurrPcieLinkGeneration = lambda handle: 1  # type: ignore[method-assign]
    world.machine.set_activity(GPU, GpuActivity(busy_fraction=1.0, pcie_tx_bytes_per_s=3.3e9, pcie_rx_bytes_per_s=1e9))
    world.tick()
    for _ in range(3):
        sample = world.one_tick_with_the_guard()[GPU]
        assert sample.pcie_tx_bytes_per_s == pytest.approx(3.3e9, rel=1e-6)
    assert world.nvml.window_reads[GPU] == 0


def test_an_idle_gpu_on_a_fast_link_is_read_less_often_the_longer_it_stays_quiet(world: World) -> None:
    """A read 5 s after the GPU went quiet, then 10 and 20 s later, then every 30 s (QUIET_READ_MAX_S)."""
    world.tick()
    world.one_tick_with_the_guard()  # the first second is guarded (no rate yet): test_the_first_reading_...
    reads, read_at = world.nvml.field_reads[GPU], []
    for index in range(100):
        samples = world.one_tick_with_the_guard()
        assert samples[GPU].pcie_tx_bytes_per_s == 0.0  # idle: the last measured rate, carried
        if world.nvml.field_reads[GPU] != reads:
            assert world.nvml.field_reads[GPU] - reads == 1  # one read, no guard reads between
            read_at.append(index)
        reads = world.nvml.field_reads[GPU]
    # 100 ticks, 5 reads (20 at one every 5 s, 100 at one a tick, about 700 at the link's wrap period); the
    # waits a tick apart at most from 10, 20, 30, 30 (the guard's reads land between ticks)
    assert read_at[0] == 4 and len(read_at) == 5
    gaps = [b - a for a, b in pairwise(read_at)]
    assert all(abs(gap - want) <= 1 for gap, want in zip(gaps, [10, 20, 30, 30], strict=True)), gaps
    world.clock.advance(0.5)
    assert world.backend.poll_pcie_counters() == PCIE_GUARD_MAX_WAIT_S  # nothing due


def test_the_quiet_wait_starts_again_at_the_slow_interval_after_the_gpu_works(window_world: World) -> None:
    world = window_world
    world.tick()
    for _ in range(40):  # quiet long enough to be read at the longest wait
        world.one_tick_with_the_guard()
    assert quiet_read_wait_s(5.0, world.backend._pcie[GPU].quiet_reads) == QUIET_READ_MAX_S
    world.machine.set_activity(GPU, GpuActivity(busy_fraction=0.5, util_pct=50.0))
    world.one_tick_with_the_guard()  # utilization: read, and no longer quiet
    world.machine.set_activity(GPU, GpuActivity())
    world.one_tick_with_the_guard()  # quiet again: one read so far
    assert world.backend._pcie[GPU].quiet_reads == 1
    assert quiet_read_wait_s(5.0, world.backend._pcie[GPU].quiet_reads) == 5.0


def test_a_quiet_gpu_is_read_again_the_tick_it_wakes(window_world: World) -> None:
    world = window_world
    world.tick()
    world.one_tick_with_the_guard()
    world.one_tick_with_the_guard()  # quiet from here: its counters are not read
    reads = world.nvml.field_reads[GPU]
    world.one_tick_with_the_guard()
    assert world.nvml.field_reads[GPU] == reads
    # a process: it may start copying any time. Its CUDA context takes memory (NVML lists only processes
    # with one), which brings the process list's read that tick (gpumix/hw/nvml_settled.py)
    world.machine.set_activity(GPU, GpuActivity(pids=[4242], mem_used_bytes=IDLE_MEM_BYTES + 512 * 2**20))
    world.one_tick_with_the_guard()
    assert world.nvml.field_reads[GPU] > reads


def test_a_quiet_gpus_slow_read_gives_the_average_since_the_last(world: World) -> None:
    """Traffic under the threshold, no process, no utilization: read every 5 s, and that read's rate is
    the exact average over the 5 s, carried over the ticks between."""
    world.machine.set_activity(GPU, GpuActivity(pcie_tx_bytes_per_s=MOVING_BYTES_PER_S / 10))
    world.tick()
    world.one_tick_with_the_guard()
    world.one_tick_with_the_guard()
    world.machine.set_activity(GPU, GpuActivity(pcie_tx_bytes_per_s=MOVING_BYTES_PER_S / 20))
    seen = [world.one_tick_with_the_guard()[GPU].pcie_tx_bytes_per_s for _ in range(6)]
    assert seen[:3] == pytest.approx([MOVING_BYTES_PER_S / 10] * 3, rel=1e-6)  # carried before the slow read
    # read 5 s after the last: 1 s at the old rate, 4 s at the new one, the average over the interval
    assert seen[3:] == pytest.approx([(MOVING_BYTES_PER_S / 10 + 4 * MOVING_BYTES_PER_S / 20) / 5] * 3, rel=1e-6)


def test_the_first_reading_is_guarded_until_a_rate_says_idle(world: World) -> None:
    world.tick()  # no rate yet: unknown counts as busy
    world.clock.advance(0.5)
    world.backend.poll_pcie_counters()
    assert world.nvml.field_reads[GPU] == 2


@pytest.mark.parametrize("activity", [
    GpuActivity(pids=[4242]),  # a process, nothing moving yet: it may start copying any time
    GpuActivity(busy_fraction=0.5, util_pct=50.0),  # kernels running
    GpuActivity(pcie_tx_bytes_per_s=2 * MOVING_BYTES_PER_S),  # traffic with no process listed (another PID namespace)
])
def test_a_gpu_that_may_move_data_is_still_read_at_the_link_period(world: World, activity: GpuActivity) -> None:
    world.machine.set_activity(GPU, activity)
    world.tick()
    world.one_tick_with_the_guard()
    reads = world.nvml.field_reads[GPU]
    world.one_tick_with_the_guard()
    assert world.nvml.field_reads[GPU] - reads >= 6  # about 1 s / 0.136 s


def test_traffic_below_the_threshold_without_a_process_is_idle(world: World) -> None:
    world.machine.set_activity(GPU, GpuActivity(pcie_tx_bytes_per_s=MOVING_BYTES_PER_S / 10))
    world.tick()
    world.one_tick_with_the_guard()
    reads = world.nvml.field_reads[GPU]
    sample = world.one_tick_with_the_guard()[GPU]
    assert world.nvml.field_reads[GPU] - reads == 0  # quiet: no guard reads, and its last rate carried
    assert sample.pcie_tx_bytes_per_s == pytest.approx(MOVING_BYTES_PER_S / 10, rel=1e-6)


def test_a_gpu_that_wakes_between_ticks_gives_no_rate_then_exact_ones(world: World) -> None:
    world.tick()
    world.one_tick_with_the_guard()  # idle: unguarded from here
    world.machine.set_activity(GPU, GpuActivity(busy_fraction=1.0, pcie_tx_bytes_per_s=FAST, pcie_rx_bytes_per_s=FAST))
    woke = world.one_tick_with_the_guard()[GPU]
    # 20 GB in a second of no reads wrapped the counter four times: any number here would be wrong
    assert woke.pcie_tx_bytes_per_s is None and woke.pcie_rx_bytes_per_s is None
    for _ in range(3):
        busy = world.one_tick_with_the_guard()[GPU]
        assert busy.pcie_tx_bytes_per_s == pytest.approx(FAST, rel=1e-6)
        assert busy.pcie_rx_bytes_per_s == pytest.approx(FAST, rel=1e-6)
    # idle again: the guard stops reading it after one tick at rate 0, and the tick reads it no more
    world.machine.set_activity(GPU, GpuActivity())
    world.one_tick_with_the_guard()
    world.one_tick_with_the_guard()
    reads = world.nvml.field_reads[GPU]
    world.one_tick_with_the_guard()
    assert world.nvml.field_reads[GPU] - reads == 0


class SlowWindowNvml(FastIdleLinkNvml):
    """nvmlDeviceGetPcieThroughput blocks like the real one (a 20 ms window): here until all
    `together` calls are in at once (5 s at most), which calls made one after the other never are."""

    together = 20  # 10 GPUs x (tx, rx)

    def __init__(self, machine: SimMachine) -> None:
        super().__init__(machine)
        self.window_calls = 0
        self._in = threading.Semaphore(0)
        self._count_lock = threading.Lock()
        self.all_in = threading.Event()

    def nvmlDeviceGetPcieThroughput(self, handle: SimHandle, counter: int) -> int:
        with self._count_lock:
            self.window_calls += 1
            if self.window_calls % self.together == 0:
                self.all_in.set()
        self.all_in.wait(5.0)
        return super().nvmlDeviceGetPcieThroughput(handle, counter)


class OneShot:
    """The demo job (every GPU moves data) seen by a backend whose first tick takes instant rates, as a
    one-shot's does; `sleep` is the backend's wait between a pair's reads."""

    def __init__(self, nvml_class: type[FastIdleLinkNvml], sleep: Any = None) -> None:
        self.clock = ManualClock()
        self.machine = SimMachine(load_builtin_rig("mixed-10"), clock=self.clock)
        self.nvml = nvml_class(self.machine)
        self.backend = NvmlBackend(nvml=self.nvml, clock=self.clock, wall_clock=self.clock,
                                   sleep=sleep if sleep is not None else self.clock.advance)
        self.backend._guard_stop.set()
        self.backend.instant_first_pcie = True

    def tick(self, advance_s: float = 1.0) -> list[Any]:
        self.clock.advance(advance_s)
        self.machine.tick()
        return self.backend.sample()


def test_instant_first_pcie_gives_rates_on_the_first_tick_from_one_pair_of_reads() -> None:
    one_shot = OneShot(FastIdleLinkNvml)
    clock, machine, nvml = one_shot.clock, one_shot.machine, one_shot.nvml
    try:
        started_s = clock() + 1.0
        first = one_shot.tick()
        assert clock() - started_s == pytest.approx(0.02)  # one 20 ms wait for all the GPUs, not one each
        for index, sample in enumerate(first):
            activity = machine.gpus[index].activity
            assert activity.pcie_rx_bytes_per_s > 0
            assert sample.pcie_rx_bytes_per_s == pytest.approx(activity.pcie_rx_bytes_per_s, rel=1e-6)
            assert sample.pcie_tx_bytes_per_s == pytest.approx(activity.pcie_tx_bytes_per_s, rel=1e-6)
        assert sum(nvml.field_reads.values()) == 20 and sum(nvml.window_reads.values()) == 0
    finally:
        one_shot.backend.close()


def test_instant_first_pcie_falls_back_to_parallel_windows() -> None:
    """The pairs' second reads bring nothing newer (NVML's clock does not move): all 20 windows at once."""
    one_shot = OneShot(SlowWindowNvml, sleep=lambda seconds: None)
    machine, nvml = one_shot.machine, one_shot.nvml
    assert isinstance(nvml, SlowWindowNvml)
    try:
        first = one_shot.tick()
        assert nvml.all_in.is_set(), "the 20 windows ran one after the other"
        for index, sample in enumerate(first):
            activity = machine.gpus[index].activity
            assert activity.pcie_rx_bytes_per_s > 0
            assert sample.pcie_rx_bytes_per_s == int(activity.pcie_rx_bytes_per_s / 1000) * 1000.0  # KB/s from NVML
            assert sample.pcie_tx_bytes_per_s == int(activity.pcie_tx_bytes_per_s / 1000) * 1000.0
        second = one_shot.tick(advance_s=0.05)  # guarded reads 50 ms apart: the counters take over
        assert nvml.window_calls == 20
        assert second[GPU].pcie_rx_bytes_per_s == pytest.approx(machine.gpus[GPU].activity.pcie_rx_bytes_per_s, abs=50.0)
    finally:
        one_shot.backend.close()


def test_without_instant_first_pcie_the_first_tick_has_no_rate(world: World) -> None:
    first = world.tick()
    assert all(sample.pcie_rx_bytes_per_s is None for sample in first)  # the default: no 20 ms window taken


def test_a_gpu_without_the_window_keeps_the_guard(window_world: World) -> None:
    world = window_world
    world.machine.faults[(GPU, "nvmlDeviceGetPcieThroughput")] = pynvml.NVML_ERROR_NOT_SUPPORTED
    world.machine.set_activity(GPU, GpuActivity(busy_fraction=1.0, pcie_tx_bytes_per_s=FAST, pcie_rx_bytes_per_s=FAST))
    world.tick()
    for _ in range(3):  # the window answers nothing once: the guard from then on
        world.one_tick_with_the_guard()
    for _ in range(3):
        busy = world.one_tick_with_the_guard()[GPU]
        assert busy.pcie_tx_bytes_per_s == pytest.approx(FAST, rel=1e-6)  # not None every tick


def test_a_first_read_that_fails_leaves_a_one_shot_the_window() -> None:
    """A transient error on a GPU's first counter read (no counters yet): that GPU takes the window."""
    one_shot = OneShot(FastIdleLinkNvml)
    machine, nvml = one_shot.machine, one_shot.nvml
    try:
        machine.faults[(GPU, "nvmlDeviceGetFieldValues")] = pynvml.NVML_ERROR_TIMEOUT
        first = one_shot.tick()
        assert first[GPU].pcie_rx_bytes_per_s == _window_rate(machine.gpus[GPU].activity.pcie_rx_bytes_per_s)
        assert first[0].pcie_rx_bytes_per_s == pytest.approx(machine.gpus[0].activity.pcie_rx_bytes_per_s, rel=1e-6)
        assert nvml.window_reads[GPU] == 2 and nvml.window_reads[0] == 0
    finally:
        one_shot.backend.close()


def _until_a_quiet_read(world: World) -> None:
    """Ticks until one reads an idle GPU's counters (its slow read): the next 5 s are carried."""
    world.tick()
    world.one_tick_with_the_guard()
    reads = world.nvml.field_reads[GPU]
    for _ in range(10):
        world.one_tick_with_the_guard()
        if world.nvml.field_reads[GPU] != reads and world.backend._pcie[GPU].last_rates == (0.0, 0.0):
            return
        reads = world.nvml.field_reads[GPU]
    raise AssertionError("no quiet read in 10 ticks")


def test_a_stream_that_wraps_into_a_quiet_looking_step_is_caught_at_the_slow_read(window_world: World) -> None:
    """6.02 GB/s with no process, no utilization and nothing else moving: 5 s of it is 7 wraps and 10 MB, a
    step that reads as 2 MB/s, under the threshold, at every slow read. The slow read takes a pair."""
    world = window_world
    _until_a_quiet_read(world)
    wait_s = int(quiet_read_wait_s(5.0, world.backend._pcie[GPU].quiet_reads))  # 10 s: its second quiet read
    rate = (1 << 32) / 5 * 7 + 10e6
    world.machine.set_activity(GPU, GpuActivity(pcie_tx_bytes_per_s=rate))
    shown = [world.one_tick_with_the_guard()[GPU].pcie_tx_bytes_per_s for _ in range(wait_s + 3)]
    assert shown[:wait_s - 1] == [0.0] * (wait_s - 1)  # carried until the slow read: what the schedule allows
    assert shown[wait_s - 1:] == pytest.approx([rate] * 4, rel=1e-6)  # then the pair's rate, every tick from there


def test_a_quiet_gpu_is_read_the_tick_its_clocks_or_power_move(window_world: World) -> None:
    """No process and no utilization, but the clocks rise (a copy engine at work): read that tick."""
    world = window_world
    _until_a_quiet_read(world)
    reads = world.nvml.field_reads[GPU]
    world.one_tick_with_the_guard()
    assert world.nvml.field_reads[GPU] == reads  # quiet: carried
    world.machine.set_activity(GPU, GpuActivity(pcie_rx_bytes_per_s=2e6))  # the simulated card clocks up
    assert world.machine.mem_clock_mhz(GPU) != 405
    world.one_tick_with_the_guard()
    assert world.nvml.field_reads[GPU] > reads
    reads = world.nvml.field_reads[GPU]
    world.machine.set_activity(GPU, GpuActivity())
    for _ in range(3):  # quiet again after one read at the idle clocks
        world.one_tick_with_the_guard()
    reads = world.nvml.field_reads[GPU]
    world.one_tick_with_the_guard()
    assert world.nvml.field_reads[GPU] == reads
    real_power = world.nvml.nvmlDeviceGetPowerUsage
    world.nvml.nvmlDeviceGetPowerUsage = lambda handle: real_power(handle) + 30_000  # type: ignore[method-assign]
    world.one_tick_with_the_guard()  # 30 W more, nothing else: read
    assert world.nvml.field_reads[GPU] > reads


def test_a_gpu_without_utilization_readings_is_never_taken_for_quiet(window_world: World) -> None:
    world = window_world
    world.nvml.nvmlDeviceGetCurrPcieLinkGeneration = lambda handle: 1  # type: ignore[method-assign]
    world.machine.faults[(GPU, "nvmlDeviceGetUtilizationRates")] = pynvml.NVML_ERROR_NOT_SUPPORTED
    world.tick()
    world.one_tick_with_the_guard()
    reads = world.nvml.field_reads[GPU]
    for _ in range(3):
        world.one_tick_with_the_guard()
    assert world.nvml.field_reads[GPU] - reads >= 3  # read every tick: unknown counts as busy


def test_a_quiet_gpu_carries_what_its_tick_showed_not_a_step_thrown_away(window_world: World) -> None:
    """A burst that ends within a tick on a fast link: that tick's counter step may be aliased and is
    thrown away for the pair's (or the window's) rate; the quiet ticks after carry what was shown."""
    world = window_world
    world.backend._sleep = lambda seconds: None  # the pair brings nothing newer: the window answers
    world.tick()
    world.one_tick_with_the_guard()
    world.machine.set_activity(GPU, GpuActivity(busy_fraction=1.0, util_pct=90.0, pcie_tx_bytes_per_s=FAST))
    world.one_tick_with_the_guard()
    world.clock.advance(0.5)
    world.machine.set_activity(GPU, GpuActivity())
    calmed = world.one_tick_with_the_guard()[GPU]  # half a second of 20 GB/s in its step: the window's 0
    assert calmed.pcie_tx_bytes_per_s == 0.0
    reads = world.nvml.field_reads[GPU]
    shown = [world.one_tick_with_the_guard()[GPU].pcie_tx_bytes_per_s for _ in range(4)]
    assert shown == [0.0] * 4 and world.nvml.field_reads[GPU] == reads  # quiet, carrying the 0 it showed


class SixtyFourBitNvml(FastIdleLinkNvml):
    """Counters declared 64-bit (as other drivers may): a reset shows as a step faster than any link."""

    jump = 0

    def nvmlDeviceGetFieldValues(self, handle: SimHandle, field_ids: list[int]) -> list[Any]:
        values = super().nvmlDeviceGetFieldValues(handle, field_ids)
        _, tx, rx = self.machine.pcie_counters(handle.index)  # the unwrapped totals, at the same instant
        for value, total in zip(values, (tx, rx), strict=True):
            value.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            value.value.ullVal = int(total) + self.jump
        return values


def test_a_counter_reset_within_a_pair_gives_the_window_not_a_rate() -> None:
    """A one-shot's pair on 64-bit counters that restart between its two reads: the window answers."""
    worlds: list[OneShot] = []

    def reset_during_the_pair(seconds: float) -> None:
        worlds[0].clock.advance(seconds)
        nvml = worlds[0].nvml
        assert isinstance(nvml, SixtyFourBitNvml)
        nvml.jump = 1 << 40  # 1 TB in 20 ms: a reset (a driver reload), not traffic

    one_shot = OneShot(SixtyFourBitNvml, sleep=reset_during_the_pair)
    worlds.append(one_shot)
    try:
        first = one_shot.tick()
        assert one_shot.nvml.field_reads[GPU] == 2  # the pair was taken
        rate = one_shot.machine.gpus[GPU].activity.pcie_tx_bytes_per_s
        assert first[GPU].pcie_tx_bytes_per_s == _window_rate(rate)  # the window, not 0 nor 55 TB/s
    finally:
        one_shot.backend.close()
