"""NvmlBackend against the NVML look-alike (SimNvml), which raises the real
pynvml error classes: every error path of gpumix/hw/nvml_backend.py.

Where the simulator lacks a behaviour (an old binding, a missing driver, a
per-field error, a slow call) a small SimNvml subclass below supplies it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pynvml
import pytest

from gpumix.hw.nvml_backend import RARE_READ_INTERVAL_S, NvmlBackend, decode_clock_event_reasons
from gpumix.hw.nvml_pcie import FIELD_PCIE_RX_BYTES, FIELD_PCIE_TX_BYTES
from gpumix.hw.nvml_topology import P2P_INDEX_READ, P2P_INDEX_WRITE
from gpumix.hw.types import GpuSample, NoDriverError
from gpumix.sim.machine import GpuActivity, SimMachine
from gpumix.sim.nvml import SimHandle, SimNvml
from gpumix.sim.rig import load_builtin_rig, parse_rig
from tests.conftest import ManualClock

WALL_OFFSET_S = 1_764_500_000.0

# mixed-10: GPUs 0-2 RTX 3060 behind the chipset (no PCIe replay counter), 3-6 RTX 3090, 7-9 RTX 4090.
RTX3060, RTX3090, RTX4090 = 0, 3, 7


# -- fakes --------------------------------------------------------------------------


class CountingNvml(SimNvml):
    """SimNvml that counts every device call that reaches it, per (gpu, function),
    and hides the functions named in `missing` (an older binding: AttributeError)."""

    missing: frozenset[str] = frozenset()

    def __init__(self, machine: SimMachine) -> None:
        super().__init__(machine)
        self.calls: Counter[tuple[int | None, str]] = Counter()
        self._calls_lock = threading.Lock()  # the PCIe fallback calls come from a thread pool

    def __getattribute__(self, name: str) -> Any:
        if name in type(self).missing:
            raise AttributeError(name)
        return super().__getattribute__(name)

    def _check(self, handle: SimHandle, function: str) -> int:
        with self._calls_lock:
            self.calls[(getattr(handle, "index", None), function)] += 1
        return super()._check(handle, function)


class WideCounterNvml(CountingNvml):
    """A driver whose PCIe byte counters are 64-bit (unsigned long long): a reset is detectable."""

    def nvmlDeviceGetFieldValues(self, handle: SimHandle, field_ids: list[int]) -> list[Any]:
        values = super().nvmlDeviceGetFieldValues(handle, field_ids)
        _, tx, rx = self.machine.pcie_counters(handle.index)
        for value, total in zip(values, (tx, rx), strict=False):
            value.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            value.value.ullVal = int(total)
        return values


class NoDriverNvml(CountingNvml):
    """nvmlInit fails as on a machine without the driver or libnvidia-ml.so."""

    init_error: BaseException = pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def nvmlInit(self) -> None:
        raise self.init_error


class BadHandleNvml(CountingNvml):
    """nvmlDeviceGetHandleByIndex fails for GPU 4 (fell off the bus before we started)."""

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimHandle:
        if index == 4:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return super().nvmlDeviceGetHandleByIndex(index)


class BytesNvml(CountingNvml):
    """Older nvidia-ml-py: strings come back as bytes."""

    def nvmlSystemGetDriverVersion(self) -> Any:
        return super().nvmlSystemGetDriverVersion().encode()

    def nvmlSystemGetNVMLVersion(self) -> Any:
        return super().nvmlSystemGetNVMLVersion().encode()

    def nvmlDeviceGetName(self, handle: SimHandle) -> Any:
        return super().nvmlDeviceGetName(handle).encode()

    def nvmlDeviceGetUUID(self, handle: SimHandle) -> Any:
        return super().nvmlDeviceGetUUID(handle).encode()

    def nvmlDeviceGetPciInfo(self, handle: SimHandle) -> Any:
        pci = super().nvmlDeviceGetPciInfo(handle)
        pci.busId = pci.busId.encode()
        return pci


class FieldErrorNvml(CountingNvml):
    """Knows nvmlDeviceGetFieldValues, but answers some fields with a per-field error."""

    field_errors: dict[tuple[int, int], int] = {}  # (gpu, field id) -> nvmlReturn

    def nvmlDeviceGetFieldValues(self, handle: SimHandle, field_ids: list[int]) -> list[Any]:
        values = super().nvmlDeviceGetFieldValues(handle, field_ids)
        for value in values:
            code = self.field_errors.get((handle.index, value.fieldId))
            if code is not None:
                value.nvmlReturn = code
                value.value.ullVal = 0
        return values


class SlowThroughputNvml(CountingNvml):
    """No PCIe byte counters anywhere, and nvmlDeviceGetPcieThroughput blocks like the real one
    (which samples for 20 ms): here until `together` calls are in at once, or `delay_s` at most.
    Calls made one after the other never get there (peak_active says how many overlapped)."""

    delay_s = 5.0
    together = 10

    def __init__(self, machine: SimMachine) -> None:
        super().__init__(machine)
        self.active = 0
        self.peak_active = 0
        self._active_lock = threading.Lock()
        self._all_in = threading.Event()

    def nvmlDeviceGetFieldValues(self, handle: SimHandle, field_ids: list[int]) -> list[Any]:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetPcieThroughput(self, handle: SimHandle, counter: int) -> int:
        with self._active_lock:
            self.active += 1
            self.peak_active = max(self.peak_active, self.active)
            if self.active >= self.together:
                self._all_in.set()
        try:
            self._all_in.wait(self.delay_s)
            return super().nvmlDeviceGetPcieThroughput(handle, counter)
        finally:
            with self._active_lock:
                self.active -= 1


THROTTLE_MASK = pynvml.nvmlClocksThrottleReasonSwPowerCap | pynvml.nvmlClocksThrottleReasonHwSlowdown


class ThrottleNvml(CountingNvml):
    """Also has the pre-535 name nvmlDeviceGetCurrentClocksThrottleReasons."""

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: SimHandle) -> int:
        self._check(handle, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return THROTTLE_MASK


class OldBindingNvml(ThrottleNvml):
    """A binding from before the rename: only the throttle-reasons name exists."""

    missing = frozenset({"nvmlDeviceGetCurrentClocksEventReasons"})


class RecordingP2PNvml(CountingNvml):
    """Records the P2P index arguments; answers `p2p_status` / `topology_level` when set."""

    p2p_status: int | None = None
    topology_level: int | None = None

    def __init__(self, machine: SimMachine) -> None:
        super().__init__(machine)
        self.p2p_indices: list[Any] = []

    def nvmlDeviceGetP2PStatus(self, handle_a: SimHandle, handle_b: SimHandle, index: int) -> int:
        self.p2p_indices.append(index)
        status = super().nvmlDeviceGetP2PStatus(handle_a, handle_b, index)
        return self.p2p_status if self.p2p_status is not None else status

    def nvmlDeviceGetTopologyCommonAncestor(self, handle_a: SimHandle, handle_b: SimHandle) -> int:
        level = super().nvmlDeviceGetTopologyCommonAncestor(handle_a, handle_b)
        return self.topology_level if self.topology_level is not None else level


# -- the rig under test ---------------------------------------------------------------


@dataclass
class Rig:
    clock: ManualClock
    machine: SimMachine
    nvml: CountingNvml
    backend: NvmlBackend

    def sample(self, advance_s: float = 1.0) -> list[GpuSample]:
        """One hub tick: time passes, the machine moves, the backend samples."""
        self.clock.advance(advance_s)
        self.machine.tick()
        return self.backend.sample()

    def calls(self, index: int, function: str) -> int:
        return self.nvml.calls[(index, function)]


def make_rig(
    nvml_class: type[CountingNvml] = CountingNvml,
    rig_text: str | None = None,
    faults: dict[tuple[int, str], int] | None = None,
    synthetic_job: bool = True,
    slow_interval_s: float = 5.0,
    exact_pcie: bool = False,
) -> Rig:
    clock = ManualClock()
    rig = parse_rig(rig_text, "x.toml") if rig_text is not None else load_builtin_rig("mixed-10")
    machine = SimMachine(rig, clock=clock)
    machine.synthetic_job = synthetic_job
    machine.faults.update(faults or {})
    nvml = nvml_class(machine)
    backend = NvmlBackend(
        nvml=nvml, clock=clock, wall_clock=lambda: WALL_OFFSET_S + clock(), slow_interval_s=slow_interval_s,
        sleep=lambda seconds: None,  # the world's clock stands still in a tick: a PCIe pair gives way to the window
    )
    backend.exact_pcie = exact_pcie
    return Rig(clock=clock, machine=machine, nvml=nvml, backend=backend)


@pytest.fixture
def rig() -> Iterator[Rig]:
    made = make_rig()
    yield made
    made.backend.close()


def _assert_readings_present(sample: GpuSample) -> None:
    assert not sample.lost
    assert sample.util_gpu_pct is not None
    assert sample.power_w is not None
    assert sample.temperature_c is not None
    assert sample.mem_used_bytes is not None


# -- start-up ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
    ],
)
def test_init_without_driver_raises_no_driver_error_in_one_line(code: int, words: str) -> None:
    class Fake(NoDriverNvml):
        init_error = pynvml.NVMLError(code)

    with pytest.raises(NoDriverError) as caught:
        make_rig(Fake)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("no NVIDIA driver")
    assert words in message
    assert caught.value.__suppress_context__  # `from None`: no pynvml traceback for the user


def test_init_with_broken_library_raises_no_driver_error() -> None:
    class Fake(NoDriverNvml):
        init_error = OSError("libnvidia-ml.so.1: cannot open shared object file")

    with pytest.raises(NoDriverError, match=r"^no NVIDIA driver found .*libnvidia-ml\.so\.1[^\n]*$"):
        make_rig(Fake)


def test_static_facts(rig: Rig) -> None:
    infos = rig.backend.gpus()
    assert [info.index for info in infos] == list(range(10))
    specs = rig.machine.rig.gpus
    assert [info.uuid for info in infos] == [spec.uuid for spec in specs]
    assert [info.pci_bus_id for info in infos] == [spec.pci_bus_id for spec in specs]
    assert infos[RTX3060].name == "NVIDIA GeForce RTX 3060"
    assert infos[RTX3060].tier == "RTX 3060 12G"
    assert infos[RTX3060].brand == "GEFORCE"
    assert infos[RTX3090].mem_total_bytes == 24 * 1024**3
    # mW -> W
    assert (infos[RTX3090].power_limit_min_w, infos[RTX3090].power_limit_default_w, infos[RTX3090].power_limit_max_w) == (
        100.0,
        350.0,
        400.0,
    )
    assert infos[2].pcie_width_max == 1  # the x1 mining riser
    assert infos[2].pcie_gen_max_gpu == 4
    assert infos[RTX4090].pcie_width_max == 16
    # infos are a copy: callers cannot change the backend's list
    infos.clear()
    assert len(rig.backend.gpus()) == 10


def test_driver_info(rig: Rig) -> None:
    info = rig.backend.driver_info()
    assert info.driver_version == "570.153.02"
    assert info.cuda_driver_version == "12.8"  # from 12080
    assert info.nvml_version == "12.570.153.02"


@pytest.mark.parametrize(("version", "label"), [(12080, "12.8"), (12010, "12.1"), (11040, "11.4"), (13000, "13.0")])
def test_cuda_version_label(version: int, label: str) -> None:
    class Fake(CountingNvml):
        def nvmlSystemGetCudaDriverVersion(self) -> int:
            return version

    made = make_rig(Fake)
    assert made.backend.driver_info().cuda_driver_version == label


def test_driver_info_calls_that_fail_give_none() -> None:
    class Fake(CountingNvml):
        missing = frozenset({"nvmlSystemGetNVMLVersion"})

        def nvmlSystemGetCudaDriverVersion(self) -> int:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    info = make_rig(Fake).backend.driver_info()
    assert info.driver_version == "570.153.02"
    assert info.cuda_driver_version is None
    assert info.nvml_version is None


def test_bytes_from_older_bindings_decode_to_str() -> None:
    made = make_rig(BytesNvml)
    str_made = make_rig()
    assert made.backend.gpus() == str_made.backend.gpus()
    info = made.backend.gpus()[RTX3090]
    assert isinstance(info.name, str) and info.name == "NVIDIA GeForce RTX 3090"
    assert isinstance(info.uuid, str) and info.uuid.startswith("GPU-")
    assert isinstance(info.pci_bus_id, str) and info.pci_bus_id == "00000000:40:00.0"
    driver = made.backend.driver_info()
    assert driver.driver_version == "570.153.02"
    assert driver.nvml_version == "12.570.153.02"
    sample = made.sample()[RTX3090]
    assert sample.uuid == info.uuid


def test_handle_lookup_failing_at_init_keeps_the_gpu_as_lost() -> None:
    made = make_rig(BadHandleNvml)
    infos = made.backend.gpus()
    assert len(infos) == 10
    assert infos[4].index == 4
    assert infos[4].uuid == "GPU-lost-4"
    assert infos[4].name == "unknown GPU"
    assert infos[4].pci_bus_id is None and infos[4].mem_total_bytes is None
    assert infos[5].uuid == made.machine.rig.gpus[5].uuid  # the neighbours are read normally
    samples = made.sample()
    assert len(samples) == 10
    assert samples[4].lost and samples[4].uuid == "GPU-lost-4"
    assert samples[4].power_w is None and samples[4].util_gpu_pct is None
    for index in (3, 5):
        _assert_readings_present(samples[index])
    made.sample()
    links = {(link.gpu_a, link.gpu_b): link for link in made.backend.p2p()}
    assert (links[(3, 4)].read, links[(3, 4)].write, links[(3, 4)].topology) == (None, None, None)
    assert (links[(4, 5)].read, links[(4, 5)].write, links[(4, 5)].topology) == (None, None, None)
    assert links[(3, 5)].read == "GPU not supported"
    # the backend never called NVML with the missing handle (None)
    assert not [key for key in made.nvml.calls if key[0] is None]


# -- per-call errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_NOT_FOUND,
    ],
)
def test_permanent_error_gives_none_and_is_not_asked_again(code: int) -> None:
    made = make_rig(faults={(RTX3090, "nvmlDeviceGetPowerUsage"): code})
    first = made.sample()
    assert first[RTX3090].power_w is None
    assert first[RTX3090].util_gpu_pct is not None  # the rest of the row is read
    assert first[RTX4090].power_w is not None  # other GPUs are not affected
    assert made.backend.unsupported[(RTX3090, "nvmlDeviceGetPowerUsage")] == str(pynvml.NVMLError(code))
    assert (RTX4090, "nvmlDeviceGetPowerUsage") not in made.backend.unsupported
    del made.machine.faults[(RTX3090, "nvmlDeviceGetPowerUsage")]  # would answer now, but is not asked
    for _ in range(3):
        assert made.sample()[RTX3090].power_w is None
    assert made.calls(RTX3090, "nvmlDeviceGetPowerUsage") == 1
    assert made.calls(RTX4090, "nvmlDeviceGetPowerUsage") == 4


def test_model_that_does_not_support_a_call() -> None:
    # A card without a fan controller answers NotSupported to nvmlDeviceGetFanSpeed.
    text = """
name = "two"
[models.blower]
name = "NVIDIA GeForce RTX 3090"
mem_gib = 24
tdp_w = 350
power_limit_min_w = 100
power_limit_max_w = 400
pcie_gen = 4
pcie_width = 16
relative_speed = 1.0
has_fan = false
unsupported_calls = ["nvmlDeviceGetTemperature"]

[[gpus]]
model = "blower"
slot_width = 16

[[gpus]]
model = "rtx3090"
slot_width = 16
"""
    made = make_rig(rig_text=text)
    for _ in range(3):
        samples = made.sample(advance_s=5.0)  # the fan is a settled reading: asked once a slow interval
        assert samples[0].fan_pct is None and samples[0].temperature_c is None
        assert samples[1].fan_pct is not None and samples[1].temperature_c is not None
    assert made.backend.unsupported[(0, "nvmlDeviceGetFanSpeed")] == "Not Supported"
    assert made.backend.unsupported[(0, "nvmlDeviceGetTemperature")] == "Not Supported"
    assert made.calls(0, "nvmlDeviceGetFanSpeed") == 1
    assert made.calls(0, "nvmlDeviceGetTemperature") == 1
    assert made.calls(1, "nvmlDeviceGetFanSpeed") == 3


def test_function_missing_from_an_old_binding_is_not_available() -> None:
    class Fake(CountingNvml):
        missing = frozenset({"nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetGpuMaxPcieLinkGeneration"})

    made = make_rig(Fake)
    assert made.backend.gpus()[RTX3090].pcie_gen_max_gpu is None
    assert made.backend.gpus()[RTX3090].pcie_gen_max == 4
    sample = made.sample()[RTX3090]
    assert sample.pcie_link_width_current is None
    assert sample.pcie_link_gen_current is not None
    assert made.backend.unsupported[(RTX3090, "nvmlDeviceGetCurrPcieLinkWidth")] == "Function Not Found"
    assert made.backend.unsupported[(RTX3090, "nvmlDeviceGetGpuMaxPcieLinkGeneration")] == "Function Not Found"


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_TIMEOUT, pynvml.NVML_ERROR_UNKNOWN])
def test_transient_error_gives_none_this_tick_and_is_asked_again(code: int) -> None:
    made = make_rig(faults={(RTX3090, "nvmlDeviceGetPowerUsage"): code})
    assert made.sample()[RTX3090].power_w is None
    assert made.sample()[RTX3090].power_w is None
    assert made.calls(RTX3090, "nvmlDeviceGetPowerUsage") == 2
    assert (RTX3090, "nvmlDeviceGetPowerUsage") not in made.backend.unsupported
    del made.machine.faults[(RTX3090, "nvmlDeviceGetPowerUsage")]
    sample = made.sample()[RTX3090]
    assert sample.power_w == pytest.approx(made.machine.power_w(RTX3090), abs=0.001)
    assert made.calls(RTX3090, "nvmlDeviceGetPowerUsage") == 3


# -- lost GPUs --------------------------------------------------------------------------


def test_gpu_lost_mid_run_stays_as_a_lost_row(rig: Rig) -> None:
    before = rig.sample()
    _assert_readings_present(before[5])
    rig.machine.lost.add(5)
    samples = rig.sample()
    assert len(samples) == 10
    lost = samples[5]
    assert lost.lost
    assert lost.index == 5 and lost.uuid == before[5].uuid
    assert lost.timestamp_s == WALL_OFFSET_S + rig.clock()
    assert lost.util_gpu_pct is None and lost.power_w is None and lost.pcie_rx_bytes_per_s is None
    assert lost.processes == []
    for index in (0, 4, 6, 9):
        _assert_readings_present(samples[index])
    # Once lost, the GPU is not asked again.
    calls_after_loss = sum(n for (gpu, _), n in rig.nvml.calls.items() if gpu == 5)
    for _ in range(2):
        assert rig.sample()[5].lost
    assert sum(n for (gpu, _), n in rig.nvml.calls.items() if gpu == 5) == calls_after_loss
    links = {(link.gpu_a, link.gpu_b): link for link in rig.backend.p2p()}
    for pair in ((0, 5), (4, 5), (5, 6), (5, 9)):
        assert (links[pair].read, links[pair].write, links[pair].topology) == (None, None, None)
    assert links[(4, 6)].read == "GPU not supported"


def test_gpu_lost_in_the_middle_of_a_tick_gives_no_partial_row(rig: Rig) -> None:
    rig.sample()
    # Utilization and power still answer, then the card falls off the bus.
    rig.machine.faults[(5, "nvmlDeviceGetTemperature")] = pynvml.NVML_ERROR_GPU_IS_LOST
    sample = rig.sample()[5]
    assert sample.lost
    assert sample.util_gpu_pct is None and sample.power_w is None and sample.energy_j is None


def test_gpu_lost_before_p2p_does_not_mark_its_peers_lost(rig: Rig) -> None:
    """GpuIsLost from a call about two GPUs may be about either one."""
    rig.sample()
    rig.machine.lost.add(5)  # lost after the last sample: only the P2P calls notice
    links = {(link.gpu_a, link.gpu_b): link for link in rig.backend.p2p()}
    for pair in ((0, 5), (4, 5), (5, 6)):
        assert (links[pair].read, links[pair].write, links[pair].topology) == (None, None, None)
    assert links[(0, 4)].read == "GPU not supported"
    assert links[(4, 6)].read == "GPU not supported"
    samples = rig.sample()
    assert [sample.index for sample in samples if sample.lost] == [5]


# -- PCIe throughput --------------------------------------------------------------------


def test_pcie_rates_from_the_cumulative_counters() -> None:
    # exact_pcie: the counters' own arithmetic (by default these busy gen4 links take the 20 ms window)
    made = make_rig(synthetic_job=False, exact_pcie=True)
    made.machine.set_activity(RTX3090, GpuActivity(busy_fraction=0.5, pcie_tx_bytes_per_s=3e9, pcie_rx_bytes_per_s=5e9))
    made.machine.set_activity(RTX4090, GpuActivity(busy_fraction=0.5, pcie_tx_bytes_per_s=1e8, pcie_rx_bytes_per_s=0.0))
    first = made.sample(0.0)
    assert all(sample.pcie_tx_bytes_per_s is None and sample.pcie_rx_bytes_per_s is None for sample in first)
    second = made.sample(0.5)
    assert second[RTX3090].pcie_tx_bytes_per_s == pytest.approx(3e9)
    assert second[RTX3090].pcie_rx_bytes_per_s == pytest.approx(5e9)
    assert second[RTX4090].pcie_tx_bytes_per_s == pytest.approx(1e8)
    assert second[RTX4090].pcie_rx_bytes_per_s == 0.0
    assert second[0].pcie_tx_bytes_per_s == 0.0  # idle
    # The rate follows the counters' own timestamps, over a longer interval too.
    made.machine.set_activity(RTX3090, GpuActivity(busy_fraction=0.5, pcie_tx_bytes_per_s=1e9, pcie_rx_bytes_per_s=2e9))
    third = made.sample(2.0)
    assert third[RTX3090].pcie_tx_bytes_per_s == pytest.approx(1e9)
    assert third[RTX3090].pcie_rx_bytes_per_s == pytest.approx(2e9)
    assert made.calls(RTX3090, "nvmlDeviceGetPcieThroughput") == 0  # no fallback needed


def test_pcie_rates_match_the_synthetic_job() -> None:
    rig = make_rig(exact_pcie=True)  # the counters' arithmetic; test_pcie_window_* cover the default
    rig.sample()
    samples = rig.sample(1.0)
    for index, sample in enumerate(samples):
        activity = rig.machine.gpus[index].activity
        assert activity.pcie_rx_bytes_per_s > 0
        # the counters are whole bytes: one byte per second of rounding at most
        assert sample.pcie_tx_bytes_per_s == pytest.approx(activity.pcie_tx_bytes_per_s, abs=2.0)
        assert sample.pcie_rx_bytes_per_s == pytest.approx(activity.pcie_rx_bytes_per_s, abs=2.0)
    rig.backend.close()


def test_pcie_counter_reset_gives_none_not_a_negative_rate() -> None:
    # With 64-bit counters a reset implies an impossible rate; 32-bit ones are unwrapped instead
    # (tests/test_pcie_counters.py), where a reset cannot be told from a wrap.
    made = make_rig(nvml_class=WideCounterNvml, synthetic_job=False)
    made.machine.set_activity(RTX3090, GpuActivity(pcie_tx_bytes_per_s=1e9, pcie_rx_bytes_per_s=1e9))
    made.sample()
    assert made.sample()[RTX3090].pcie_tx_bytes_per_s == pytest.approx(1e9)
    gpu = made.machine.gpus[RTX3090]
    gpu.pcie_tx_total_bytes = 0.0  # driver reload: the counter starts over
    reset = made.sample()[RTX3090]
    assert reset.pcie_tx_bytes_per_s is None and reset.pcie_rx_bytes_per_s is None
    after = made.sample()[RTX3090]  # the reading after the reset is the new base
    assert after.pcie_tx_bytes_per_s == pytest.approx(1e9)
    assert after.pcie_rx_bytes_per_s == pytest.approx(1e9)
    gpu.pcie_rx_total_bytes = 0.0
    assert made.sample()[RTX3090].pcie_rx_bytes_per_s is None


def test_pcie_counters_with_the_same_timestamp_give_none() -> None:
    made = make_rig(synthetic_job=False)
    made.machine.set_activity(RTX3090, GpuActivity(pcie_tx_bytes_per_s=1e9, pcie_rx_bytes_per_s=1e9))
    made.sample()
    same = made.sample(0.0)[RTX3090]  # no time passed: no rate, and no division by zero
    assert same.pcie_tx_bytes_per_s is None and same.pcie_rx_bytes_per_s is None
    assert made.sample()[RTX3090].pcie_tx_bytes_per_s == pytest.approx(1e9)


def test_pcie_counters_transient_error_does_not_fall_back() -> None:
    made = make_rig(synthetic_job=False, faults={(RTX3090, "nvmlDeviceGetFieldValues"): pynvml.NVML_ERROR_TIMEOUT})
    made.machine.set_activity(RTX3090, GpuActivity(pcie_tx_bytes_per_s=1e9, pcie_rx_bytes_per_s=1e9))
    made.sample()
    made.sample()
    assert made.sample()[RTX3090].pcie_tx_bytes_per_s is None
    assert made.calls(RTX3090, "nvmlDeviceGetFieldValues") == 3
    assert made.calls(RTX3090, "nvmlDeviceGetPcieThroughput") == 0
    assert (RTX3090, "pcie_counters") not in made.backend.unsupported
    del made.machine.faults[(RTX3090, "nvmlDeviceGetFieldValues")]
    made.sample()
    assert made.sample()[RTX3090].pcie_tx_bytes_per_s == pytest.approx(1e9)


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION])
def test_pcie_counters_unsupported_fall_back_to_throughput(code: int) -> None:
    # exact_pcie: RTX4090 stays on its counters (by default its busy gen4 link would take the window)
    made = make_rig(synthetic_job=False, faults={(RTX3090, "nvmlDeviceGetFieldValues"): code}, exact_pcie=True)
    made.machine.set_activity(RTX3090, GpuActivity(pcie_tx_bytes_per_s=3_000_500.0, pcie_rx_bytes_per_s=7e9))
    made.machine.set_activity(RTX4090, GpuActivity(pcie_tx_bytes_per_s=2e9, pcie_rx_bytes_per_s=2e9))
    first = made.sample()
    # The fallback answers in the very first tick (it needs no previous reading), in bytes/s.
    assert first[RTX3090].pcie_tx_bytes_per_s == 3_000_000.0  # 3000 KB/s
    assert first[RTX3090].pcie_rx_bytes_per_s == 7e9
    assert first[RTX4090].pcie_tx_bytes_per_s is None  # still on the counters: first reading
    assert (RTX3090, "pcie_counters") in made.backend.unsupported
    assert (RTX4090, "pcie_counters") not in made.backend.unsupported
    second = made.sample()
    assert second[RTX3090].pcie_rx_bytes_per_s == 7e9
    assert second[RTX4090].pcie_tx_bytes_per_s == pytest.approx(2e9)
    assert made.calls(RTX3090, "nvmlDeviceGetFieldValues") == 1  # not asked again
    assert made.calls(RTX3090, "nvmlDeviceGetPcieThroughput") == 4  # tx + rx, two ticks
    assert made.calls(RTX4090, "nvmlDeviceGetPcieThroughput") == 0


@pytest.mark.parametrize("failing_field", [FIELD_PCIE_TX_BYTES, FIELD_PCIE_RX_BYTES])
def test_pcie_per_field_error_falls_back_to_throughput(failing_field: int) -> None:
    class Fake(FieldErrorNvml):
        field_errors = {(RTX3090, failing_field): pynvml.NVML_ERROR_NOT_SUPPORTED}

    made = make_rig(Fake, synthetic_job=False)
    made.machine.set_activity(RTX3090, GpuActivity(pcie_tx_bytes_per_s=4e9, pcie_rx_bytes_per_s=6e9))
    for _ in range(3):
        sample = made.sample()[RTX3090]
        assert (sample.pcie_tx_bytes_per_s, sample.pcie_rx_bytes_per_s) == (4e9, 6e9)
    assert made.backend.unsupported[(RTX3090, "pcie_counters")] == "PCIe byte counters not supported"
    assert made.calls(RTX3090, "nvmlDeviceGetFieldValues") == 1
    assert made.calls(RTX3090, "nvmlDeviceGetPcieThroughput") == 6


def test_pcie_fallback_calls_run_in_parallel() -> None:
    made = make_rig(SlowThroughputNvml)
    samples = made.sample()
    # 10 GPUs x 2 counters: each call blocks until 10 are in at once, which one after the other never are
    assert made.nvml.peak_active >= SlowThroughputNvml.together
    for index, sample in enumerate(samples):
        activity = made.machine.gpus[index].activity
        assert sample.pcie_tx_bytes_per_s == int(activity.pcie_tx_bytes_per_s / 1000) * 1000.0
        assert sample.pcie_rx_bytes_per_s == int(activity.pcie_rx_bytes_per_s / 1000) * 1000.0
    made.backend.close()


def test_pcie_throughput_unsupported_too_gives_none_and_skips_lost_gpus() -> None:
    made = make_rig(
        synthetic_job=False,
        faults={
            (RTX3090, "nvmlDeviceGetFieldValues"): pynvml.NVML_ERROR_NOT_SUPPORTED,
            (RTX3090, "nvmlDeviceGetPcieThroughput"): pynvml.NVML_ERROR_NOT_SUPPORTED,
            (RTX4090, "nvmlDeviceGetFieldValues"): pynvml.NVML_ERROR_NOT_SUPPORTED,
        },
    )
    for _ in range(2):
        sample = made.sample()[RTX3090]
        assert sample.pcie_tx_bytes_per_s is None and sample.pcie_rx_bytes_per_s is None
    assert made.calls(RTX3090, "nvmlDeviceGetPcieThroughput") == 1
    made.machine.lost.add(RTX4090)
    throughput_calls = made.calls(RTX4090, "nvmlDeviceGetPcieThroughput")
    assert throughput_calls == 4
    assert made.sample()[RTX4090].lost
    assert made.calls(RTX4090, "nvmlDeviceGetPcieThroughput") == throughput_calls


# -- P2P and topology ---------------------------------------------------------------------


def test_p2p_passes_int_indices_and_decodes_names() -> None:
    assert pynvml.NVML_P2P_CAPS_INDEX_READ in ((0,), 0)  # (0,) in nvidia-ml-py 13
    assert type(P2P_INDEX_READ) is int and type(P2P_INDEX_WRITE) is int
    made = make_rig(RecordingP2PNvml)
    links = made.backend.p2p()
    assert len(links) == 45  # every unordered pair of 10 GPUs, once
    assert [(link.gpu_a, link.gpu_b) for link in links] == [(a, b) for a in range(10) for b in range(a + 1, 10)]
    assert made.nvml.p2p_indices
    assert all(type(index) is int for index in made.nvml.p2p_indices)
    assert set(made.nvml.p2p_indices) == {P2P_INDEX_READ, P2P_INDEX_WRITE} == {0, 1}
    assert all(link.read == "GPU not supported" and link.write == "GPU not supported" for link in links)
    by_pair = {(link.gpu_a, link.gpu_b): link for link in links}
    assert by_pair[(0, 1)].topology == "PXB"  # both behind the chipset's switch
    assert by_pair[(0, 3)].topology == "SYS"
    assert by_pair[(3, 7)].topology == "PHB"


@pytest.mark.parametrize(
    ("status", "level", "read", "topology"),
    [(0, 10, "OK", "PIX"), (4, 40, "disabled by regkey", "NODE"), (9, 60, "9", "60")],
)
def test_p2p_status_and_topology_decoding(status: int, level: int, read: str, topology: str) -> None:
    class Fake(RecordingP2PNvml):
        p2p_status = status
        topology_level = level

    link = make_rig(Fake).backend.p2p()[0]
    assert (link.read, link.write, link.topology) == (read, read, topology)


def test_p2p_unsupported_topology_gives_none_for_that_gpus_pairs_only() -> None:
    made = make_rig(faults={(3, "nvmlDeviceGetTopologyCommonAncestor"): pynvml.NVML_ERROR_NOT_SUPPORTED})
    by_pair = {(link.gpu_a, link.gpu_b): link for link in made.backend.p2p()}
    assert by_pair[(3, 4)].topology is None and by_pair[(3, 4)].read == "GPU not supported"
    assert by_pair[(0, 3)].topology is None
    # The error of pair (0, 3) is about GPU 3: GPU 0's other pairs still answer.
    assert by_pair[(0, 4)].topology == "SYS"
    assert by_pair[(4, 5)].topology == "PHB"
    assert (0, "nvmlDeviceGetTopologyCommonAncestor") not in made.backend.unsupported


def test_p2p_missing_from_an_old_binding_gives_none() -> None:
    class Fake(CountingNvml):
        missing = frozenset({"nvmlDeviceGetP2PStatus"})

    made = make_rig(Fake)
    links = made.backend.p2p()
    assert all(link.read is None and link.write is None for link in links)
    assert links[0].topology == "PXB"
    assert not any(link.lost for link in made.sample())


# -- slow readings --------------------------------------------------------------------------


LIMIT, REPLAYS, ENFORCED = ("nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetPcieReplayCounter",
                             "nvmlDeviceGetEnforcedPowerLimit")


def test_slow_readings_follow_the_enforced_limit_and_the_rare_schedule(rig: Rig) -> None:
    """The power-management limit and the replay counter (0.3-0.55 ms each on a Hopper) are read at the first
    tick, after forget_slow_readings, every RARE_READ_INTERVAL_S, and when the enforced limit moves (at most
    once a slow interval, 5 s here)."""
    assert rig.sample(0.0)[RTX3090].power_cap_w == 350.0
    for _ in range(3):
        rig.sample(1.0)  # t = 3 s
    assert rig.calls(RTX3090, LIMIT) == 1 and rig.calls(RTX3090, REPLAYS) == 1
    assert rig.calls(RTX3090, ENFORCED) == 4  # the cheap one, every tick
    rig.machine.set_power_cap_w(RTX3090, 250.0)  # another tool sets a cap: the enforced limit moves
    sample = rig.sample(1.0)[RTX3090]  # t = 4 s: within 5 s of the last read
    assert sample.power_cap_enforced_w == 250.0 and sample.power_cap_w == 350.0
    sample = rig.sample(1.0)[RTX3090]  # t = 5 s
    assert sample.power_cap_w == 250.0
    assert rig.calls(RTX3090, LIMIT) == 2 and rig.calls(RTX3090, REPLAYS) == 2
    assert rig.calls(RTX4090, LIMIT) == 1  # only that GPU's limit moved
    rig.sample(1.0)  # t = 6 s: the enforced limit stands, nothing read
    assert rig.calls(RTX3090, LIMIT) == 2
    rig.backend.forget_slow_readings(RTX4090)
    rig.sample(0.5)  # t = 6.5 s
    assert rig.calls(RTX4090, LIMIT) == 2 and rig.calls(RTX3090, LIMIT) == 2
    rig.sample(RARE_READ_INTERVAL_S - 2.0)  # t = 34.5 s: 29.5 s after GPU 3's read
    assert rig.calls(RTX3090, LIMIT) == 2
    rig.sample(0.5)  # t = 35 s: its rare interval is up, though nothing moved
    assert rig.calls(RTX3090, LIMIT) == 3 and rig.calls(RTX3090, REPLAYS) == 3
    assert rig.calls(RTX4090, LIMIT) == 2  # read at 6.5 s


class WanderingEnforcedNvml(CountingNvml):
    """A board whose enforced limit moves by itself every tick (platform power steering), cap unchanged."""

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: SimHandle) -> int:
        return super().nvmlDeviceGetEnforcedPowerLimit(handle) - 1000 * (self.calls[(handle.index, ENFORCED)] % 2)


def test_an_enforced_limit_that_wanders_brings_the_slow_readings_once_a_slow_interval() -> None:
    made = make_rig(WanderingEnforcedNvml)
    try:
        made.sample(0.0)
        for _ in range(30):
            made.sample(1.0)  # t = 30 s: the enforced limit moved every tick
        assert made.calls(RTX3090, LIMIT) == 1 + 6  # the first tick's, then one each 5 s (not 30)
    finally:
        made.backend.close()


def test_a_slow_reading_that_failed_for_now_is_asked_again_after_the_slow_interval() -> None:
    made = make_rig(faults={(RTX3090, LIMIT): pynvml.NVML_ERROR_UNKNOWN})  # transient: asked again
    try:
        assert made.sample(0.0)[RTX3090].power_cap_w is None
        del made.machine.faults[(RTX3090, LIMIT)]
        for _ in range(4):
            assert made.sample(1.0)[RTX3090].power_cap_w is None  # t = 4 s
        assert made.sample(1.0)[RTX3090].power_cap_w == 350.0  # t = 5 s, not 30 s
        assert made.calls(RTX3090, LIMIT) == 2
        for _ in range(20):
            made.sample(1.0)  # t = 25 s: read, now on the rare schedule
        assert made.calls(RTX3090, LIMIT) == 2
        # the 3060 has no replay counter (unsupported, not failed for now): its limit stays on the rare schedule
        assert made.backend.unsupported[(RTX3060, REPLAYS)] == "Not Supported" and made.calls(RTX3060, LIMIT) == 1
    finally:
        made.backend.close()


def test_a_replay_counter_that_failed_for_now_is_asked_again_after_the_slow_interval() -> None:
    made = make_rig(faults={(RTX3090, REPLAYS): pynvml.NVML_ERROR_TIMEOUT})
    try:
        assert made.sample(0.0)[RTX3090].pcie_replay_count is None
        del made.machine.faults[(RTX3090, REPLAYS)]
        for _ in range(5):
            made.sample(1.0)  # t = 5 s
        assert made.calls(RTX3090, REPLAYS) == 2 and made.sample(1.0)[RTX3090].pcie_replay_count == 0
    finally:
        made.backend.close()


def test_an_enforced_limit_that_never_reads_leaves_the_slow_readings_on_the_rare_schedule() -> None:
    made = make_rig(faults={(RTX3090, ENFORCED): pynvml.NVML_ERROR_UNKNOWN})
    try:
        for _ in range(int(RARE_READ_INTERVAL_S)):
            sample = made.sample(1.0)[RTX3090]  # t = 1 ... 30 s
            assert sample.power_cap_enforced_w is None and sample.power_cap_w == 350.0
        assert made.calls(RTX3090, LIMIT) == 1  # at 1 s: a None that stays None is no move
        made.sample(1.0)  # t = 31 s: the rare schedule
        assert made.calls(RTX3090, LIMIT) == 2
    finally:
        made.backend.close()


def test_slow_reading_values_between_reads(rig: Rig) -> None:
    for advance_s in (0.0, 1.0, 1.0):
        samples = rig.sample(advance_s)
        assert samples[RTX3090].pcie_replay_count == 0
        assert samples[RTX3060].pcie_replay_count is None  # the RTX 3060 has no replay counter
        assert samples[RTX4090].power_cap_w == 450.0
    assert rig.backend.unsupported[(RTX3060, "nvmlDeviceGetPcieReplayCounter")] == "Not Supported"
    rig.backend.forget_slow_readings(RTX3060)
    rig.sample()
    assert rig.calls(RTX3060, "nvmlDeviceGetPowerManagementLimit") == 2
    assert rig.calls(RTX3060, "nvmlDeviceGetPcieReplayCounter") == 1  # unsupported stays unsupported


# -- clock event reasons ----------------------------------------------------------------------


def test_decode_clock_event_reasons() -> None:
    assert decode_clock_event_reasons(0) == []
    assert decode_clock_event_reasons(pynvml.nvmlClocksEventReasonGpuIdle) == ["idle"]
    mask = pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonSwThermalSlowdown
    assert decode_clock_event_reasons(mask) == ["power cap", "SW thermal"]
    assert decode_clock_event_reasons(0x8 | 0x40 | 0x80) == ["HW slowdown", "HW thermal", "power brake"]
    assert decode_clock_event_reasons(0x10000) == []  # bits we do not name are left out


def test_clock_event_reasons_idle_power_cap_and_thermal() -> None:
    made = make_rig(synthetic_job=False)
    # Full load under a cap far below what the card wants: power cap.
    made.machine.set_activity(RTX3090, GpuActivity(busy_fraction=1.0, util_pct=100))
    made.machine.set_power_cap_w(RTX3090, 200.0)
    # Full load with the cap above the demand: hot enough for a thermal slowdown.
    made.machine.set_activity(4, GpuActivity(busy_fraction=1.0, util_pct=100))
    made.machine.set_power_cap_w(4, 400.0)
    samples = made.sample()
    assert samples[RTX3090].clock_event_reasons == ["power cap"]
    assert samples[4].clock_event_reasons == ["SW thermal"]
    assert samples[RTX4090].clock_event_reasons == ["idle"]
    assert made.calls(RTX4090, "nvmlDeviceGetCurrentClocksEventReasons") == 1


def test_clock_reasons_fall_back_to_the_throttle_name_on_an_old_binding() -> None:
    made = make_rig(OldBindingNvml)
    for _ in range(3):
        assert made.sample()[RTX3090].clock_event_reasons == ["power cap", "HW slowdown"]
    assert made.backend.unsupported[(RTX3090, "nvmlDeviceGetCurrentClocksEventReasons")] == "Function Not Found"
    assert made.calls(RTX3090, "nvmlDeviceGetCurrentClocksThrottleReasons") == 3


def test_clock_reasons_fall_back_to_the_throttle_name_on_an_old_driver() -> None:
    made = make_rig(
        ThrottleNvml,
        faults={(RTX3090, "nvmlDeviceGetCurrentClocksEventReasons"): pynvml.NVML_ERROR_FUNCTION_NOT_FOUND},
    )
    for _ in range(2):
        samples = made.sample()
        assert samples[RTX3090].clock_event_reasons == ["power cap", "HW slowdown"]
        assert samples[RTX4090].clock_event_reasons != ["power cap", "HW slowdown"]  # the new name
    assert made.calls(RTX3090, "nvmlDeviceGetCurrentClocksEventReasons") == 1
    assert made.calls(RTX3090, "nvmlDeviceGetCurrentClocksThrottleReasons") == 2
    assert made.calls(RTX4090, "nvmlDeviceGetCurrentClocksThrottleReasons") == 0


def test_clock_reasons_none_when_neither_name_exists() -> None:
    class Fake(CountingNvml):
        missing = frozenset({"nvmlDeviceGetCurrentClocksEventReasons"})

    made = make_rig(Fake)
    assert made.sample()[RTX3090].clock_event_reasons is None
    assert made.backend.unsupported[(RTX3090, "nvmlDeviceGetCurrentClocksEventReasons")] == "Function Not Found"
    assert made.backend.unsupported[(RTX3090, "nvmlDeviceGetCurrentClocksThrottleReasons")] == "Function Not Found"
    assert made.sample()[RTX3090].clock_event_reasons is None


# -- energy ----------------------------------------------------------------------------------


def test_energy_integrates_power_over_the_clock(rig: Rig) -> None:
    energy_j = 0.0
    assert rig.sample(0.0)[RTX3090].energy_j == 0.0
    for advance_s in (1.0, 0.5, 2.0, 0.25):
        sample = rig.sample(advance_s)[RTX3090]
        assert sample.power_w is not None and sample.power_w > 50
        energy_j += sample.power_w * advance_s
        assert sample.energy_j == pytest.approx(energy_j)
    assert rig.calls(RTX3090, "nvmlDeviceGetTotalEnergyConsumption") == 0  # 3.7 ms a call: not used


def test_energy_holds_while_power_is_missing() -> None:
    made = make_rig()
    made.sample(0.0)
    first = made.sample(1.0)[RTX3090].energy_j
    assert first is not None and first > 0
    made.machine.faults[(RTX3090, "nvmlDeviceGetPowerUsage")] = pynvml.NVML_ERROR_TIMEOUT
    missing = made.sample(1.0)[RTX3090]
    assert missing.power_w is None
    assert missing.energy_j == first  # kept, not reset, not guessed
    del made.machine.faults[(RTX3090, "nvmlDeviceGetPowerUsage")]
    back = made.sample(1.0)[RTX3090]
    assert back.energy_j == pytest.approx(first + back.power_w * 1.0)


def test_energy_none_without_power() -> None:
    made = make_rig(faults={(RTX3090, "nvmlDeviceGetPowerUsage"): pynvml.NVML_ERROR_NOT_SUPPORTED})
    assert made.sample()[RTX3090].energy_j is None
    assert made.sample()[RTX3090].energy_j is None


# -- the rest of a sample ------------------------------------------------------------------


def test_sample_readings_follow_the_machine(rig: Rig) -> None:
    sample = rig.sample()[RTX4090]
    machine = rig.machine
    assert sample.index == RTX4090
    assert sample.timestamp_s == WALL_OFFSET_S + rig.clock()
    assert sample.util_gpu_pct == machine.util_pct(RTX4090)
    assert sample.power_w == int(machine.power_w(RTX4090) * 1000) / 1000  # mW -> W
    assert sample.power_cap_enforced_w == 450.0
    assert sample.mem_total_bytes == 24 * 1024**3
    assert sample.mem_used_bytes == machine.gpus[RTX4090].activity.mem_used_bytes
    assert sample.clock_sm_mhz == machine.sm_clock_mhz(RTX4090)
    assert sample.clock_mem_mhz == machine.mem_clock_mhz(RTX4090)
    assert sample.pcie_link_gen_current == 4 and sample.pcie_link_width_current == 16


def test_processes_are_reported() -> None:
    made = make_rig(synthetic_job=False)
    made.machine.set_activity(RTX3090, GpuActivity(busy_fraction=0.5, mem_used_bytes=4_000, pids=[101, 202]))
    sample = made.sample()[RTX3090]
    assert [(process.pid, process.gpu_mem_bytes) for process in sample.processes] == [(101, 2_000), (202, 2_000)]
    assert made.sample()[RTX4090].processes == []


def test_close_shuts_nvml_down(rig: Rig) -> None:
    rig.sample()
    assert rig.nvml.initialized
    rig.backend.close()
    assert not rig.nvml.initialized


def test_the_link_width_is_asked_when_the_generation_changes_and_on_the_rare_schedule() -> None:
    """nvmlDeviceGetCurrPcieLinkWidth costs ~0.1 ms in an H200's tick (issue 13): not every tick."""
    made = make_rig(synthetic_job=False)  # idle: GeForce links rest at gen1
    width = "nvmlDeviceGetCurrPcieLinkWidth"
    try:
        made.sample()
        assert made.calls(0, width) == 1
        for _ in range(3):
            idle = made.sample()[0]
        assert made.calls(0, width) == 1 and idle.pcie_link_gen_current == 1
        assert idle.pcie_link_width_current == made.machine.gpus[0].spec.link_width_max  # carried, not dropped
        made.machine.set_activity(0, GpuActivity(busy_fraction=1.0, util_pct=100.0))  # the link retrains up
        busy = made.sample()[0]
        assert busy.pcie_link_gen_current > 1 and made.calls(0, width) == 2
        made.sample()
        assert made.calls(0, width) == 2
        made.sample(advance_s=RARE_READ_INTERVAL_S - 2.0)  # 29 s after the retrain's read
        assert made.calls(0, width) == 2
        made.sample()  # 30 s: the rare schedule asks again though nothing changed
        assert made.calls(0, width) == 3
    finally:
        made.backend.close()
