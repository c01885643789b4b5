"""NVML backend: reads real GPUs through pynvml (the nvidia-ml-py distribution).

Every NVML call goes through `_call`, which turns NVML errors into `None`
("not available") and never raises into the caller. A call that answers
NotSupported / FunctionNotFound / NoPermission is remembered and not asked
again: on real hardware such a failing call still costs 0.4-2.7 ms.
A GPU that answers GpuIsLost stays in the table, marked lost.

Costs measured on H200 (docs/benchmarks.md): the cheap set (utilization,
memory, power, clocks, temperature, link gen/width) is ~60 us per GPU; the
PCIe byte counters (field values 197/198) ~0.6 ms; the power-management
limit and the replay counter ~0.37 ms each, so those two are read on a slow
schedule; total energy costs 3.7 ms, so energy is integrated from power.

Asked once a second, a cheap getter costs 50-60 µs of CPU on an H100 (1.5 µs back to back: session 12,
`benchmarks/nvml_call_costs.py`); so what seldom moves is read seldom: the power-management limit, replay
counter and link width every 30 s and on a sign (`_slow_readings`, `_link_width`), the temperature, fan
and processes every 5 s and when the GPU's activity changes (`gpumix.hw.nvml_settled`).

The guarded reads are here; PCIe throughput is `gpumix.hw.nvml_pcie`, P2P and NVLink
`gpumix.hw.nvml_topology` (parts of NvmlBackend).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import pynvml

from gpumix.hw.call_pool import CallPool
from gpumix.hw.nvml_pcie import NvmlPcie
from gpumix.hw.nvml_settled import NvmlSettled, SettledReading
from gpumix.hw.nvml_topology import NvmlTopology, _text
from gpumix.hw.pcie_counters import PcieCounters
from gpumix.hw.types import DriverInfo, GpuInfo, GpuSample, NoDriverError

CLOCK_EVENT_REASONS = {
    0x1: "idle",
    0x2: "app clocks",
    0x4: "power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal",
    0x40: "HW thermal",
    0x80: "power brake",
    0x100: "display clocks",
}

# Errors that will not change while we run: remember them, never ask again.
_PERMANENT_ERRORS = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_FunctionNotFound,
    pynvml.NVMLError_NoPermission,
    pynvml.NVMLError_NotFound,
)

# Readings that seldom change and cost 0.1-0.5 ms each in an H200's tick (issue 13): the power-management
# limit (also read when the enforced limit moves), the PCIe replay counter and the link width (also read when
# the generation moves). Their share of a 1 s tick falls from ~0.2 ms a GPU at 5 s to ~0.03 ms.
RARE_READ_INTERVAL_S = 30.0
_EVENT_REASONS = "nvmlDeviceGetCurrentClocksEventReasons"
_SLOW_CALLS = ("nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetPcieReplayCounter")  # _slow_readings, in order
# A tick's readings of every GPU, in the order they are asked; then the slow ones (_slow_readings) and the
# settled ones (gpumix/hw/nvml_settled.py: temperature, fan, processes)
_TICK_CALLS: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("nvmlDeviceGetUtilizationRates", ()), ("nvmlDeviceGetMemoryInfo", ()), ("nvmlDeviceGetPowerUsage", ()),
    ("nvmlDeviceGetEnforcedPowerLimit", ()), ("nvmlDeviceGetClockInfo", (pynvml.NVML_CLOCK_SM,)),
    ("nvmlDeviceGetClockInfo", (pynvml.NVML_CLOCK_MEM,)), (_EVENT_REASONS, ()),
    ("nvmlDeviceGetCurrPcieLinkGeneration", ()))


class _SlowRead(NamedTuple):
    """A GPU's power-management limit and replay counter as last read, and when to read them again."""

    limit_w: float | None
    replays: int | None
    read_at_s: float
    due_at_s: float  # read again then, whatever moves
    enforced_mw: int | None  # the enforced limit at the read (a move brings a read once a slow interval)


def decode_clock_event_reasons(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


def _brand_name(brand: int | None) -> str | None:
    if brand is None:
        return None
    for attr in dir(pynvml):
        if attr.startswith("NVML_BRAND_") and attr != "NVML_BRAND_COUNT" and getattr(pynvml, attr) == brand:
            return attr.removeprefix("NVML_BRAND_")
    return str(brand)


def _cuda_version_label(version: int | None) -> str | None:
    if version is None:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def _no_driver_message(error: BaseException) -> str:
    return f"no NVIDIA driver found (NVML: {error})"


class NvmlBackend(NvmlPcie, NvmlSettled, NvmlTopology):
    """Hardware backend over NVML. `nvml` defaults to pynvml; tests and the
    simulator pass an object with the same functions that raises the real
    pynvml error classes."""

    def __init__(
        self,
        nvml: Any = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        slow_interval_s: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        rare_interval_s: float = RARE_READ_INTERVAL_S,
    ) -> None:
        self._nvml = nvml if nvml is not None else pynvml
        self._clock = clock
        self._wall_clock = wall_clock
        self._sleep = sleep  # between a pair of PCIe counter reads (tests pass their clock's advance)
        self._slow_interval_s = slow_interval_s  # the longest a quiet GPU's PCIe counters go unread
        self._rare_interval_s = rare_interval_s  # the power-management limit, replay counter and link width
        try:
            self._nvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise NoDriverError(_no_driver_message(error)) from None
        except OSError as error:  # a broken libnvidia-ml.so
            raise NoDriverError(_no_driver_message(error)) from None
        self.unsupported: dict[tuple[int, str], str] = {}  # (gpu, call) -> NVML's answer
        self._lost: set[int] = set()
        self._handles: list[Any] = []
        count = self._system_call("nvmlDeviceGetCount") or 0
        for index in range(count):
            try:
                self._handles.append(self._nvml.nvmlDeviceGetHandleByIndex(index))
            except pynvml.NVMLError:
                self._handles.append(None)
                self._lost.add(index)
        self._infos = [self._read_info(index) for index in range(count)]
        self._pcie: dict[int, PcieCounters] = {}
        self._pcie_lock = threading.Lock()  # the sampler and the wrap guard both read counters
        self._pcie_guard: threading.Thread | None = None
        self._guard_stop = threading.Event()
        self._pcie_fallback_pool: CallPool | None = None
        self._slow_reads: dict[int, _SlowRead] = {}  # gpu -> its power-management limit and replay counter
        self._link_widths: dict[int, tuple[int | None, int | None, float]] = {}  # gpu -> (gen, width, read at)
        self._settled: dict[int, SettledReading] = {}
        self._energy_j: dict[int, float] = {}
        self._last_sample_at: dict[int, float] = {}

    # -- guarded calls -------------------------------------------------------

    def _system_call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, name)(*args)
        except (pynvml.NVMLError, AttributeError):
            return None

    def _call(self, index: int, name: str, *args: Any) -> Any:
        """One guarded NVML call on GPU `index`: the value, or None if not available."""
        if index in self._lost or (index, name) in self.unsupported:
            return None
        try:
            return getattr(self._nvml, name)(self._handles[index], *args)
        except pynvml.NVMLError_GpuIsLost:
            self._lost.add(index)
        except _PERMANENT_ERRORS as error:
            self.unsupported[(index, name)] = str(error)
        except AttributeError:  # an older binding without this function
            self.unsupported[(index, name)] = "Function Not Found"
        except pynvml.NVMLError:
            pass  # transient (Timeout, Unknown): ask again next tick
        return None

    def _failed_for_now(self, index: int, names: tuple[str, ...], values: list[Any]) -> bool:
        """Whether a reading of these calls gave None for now: not unsupported (remembered), GPU not lost."""
        return index not in self._lost and any(
            value is None and (index, name) not in self.unsupported for name, value in zip(names, values, strict=True))

    def forget_slow_readings(self, index: int) -> None:
        """Re-read the power limit on the next tick (after a cap was changed)."""
        self._slow_reads.pop(index, None)

    def power_limit_w(self, index: int) -> float | None:
        """The power cap now (nvidia-smi power.limit), read fresh: controls must not act on a stale value."""
        limit_mw = self._call(index, "nvmlDeviceGetPowerManagementLimit")
        return limit_mw / 1000 if limit_mw is not None else None

    def set_power_limit_w(self, index: int, watts: float) -> None:
        """nvidia-smi -i INDEX -pl WATTS. Unlike reads, NVML's errors propagate: the caller
        explains a refusal (NoPermission, NotSupported) to the user."""
        if index in self._lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        self._nvml.nvmlDeviceSetPowerManagementLimit(self._handles[index], int(round(watts * 1000)))
        self.forget_slow_readings(index)

    # -- static facts ---------------------------------------------------------

    def driver_info(self) -> DriverInfo:
        driver = self._system_call("nvmlSystemGetDriverVersion")
        cuda = self._system_call("nvmlSystemGetCudaDriverVersion")
        nvml_version = self._system_call("nvmlSystemGetNVMLVersion")
        return DriverInfo(
            driver_version=_text(driver) if driver is not None else None,
            cuda_driver_version=_cuda_version_label(cuda),
            nvml_version=_text(nvml_version) if nvml_version is not None else None,
        )

    def _read_info(self, index: int) -> GpuInfo:
        name = self._call(index, "nvmlDeviceGetName")
        uuid = self._call(index, "nvmlDeviceGetUUID")
        pci = self._call(index, "nvmlDeviceGetPciInfo")
        memory = self._call(index, "nvmlDeviceGetMemoryInfo")
        constraints = self._call(index, "nvmlDeviceGetPowerManagementLimitConstraints")
        default_mw = self._call(index, "nvmlDeviceGetPowerManagementDefaultLimit")
        return GpuInfo(
            index=index,
            uuid=_text(uuid) if uuid is not None else f"GPU-lost-{index}",
            name=_text(name) if name is not None else "unknown GPU",
            brand=_brand_name(self._call(index, "nvmlDeviceGetBrand")),
            pci_bus_id=_text(pci.busId) if pci is not None else None,
            mem_total_bytes=int(memory.total) if memory is not None else None,
            power_limit_min_w=constraints[0] / 1000 if constraints else None,
            power_limit_max_w=constraints[1] / 1000 if constraints else None,
            power_limit_default_w=default_mw / 1000 if default_mw is not None else None,
            pcie_gen_max_gpu=self._call(index, "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
            pcie_gen_max=self._call(index, "nvmlDeviceGetMaxPcieLinkGeneration"),
            pcie_width_max=self._call(index, "nvmlDeviceGetMaxPcieLinkWidth"),
        )

    def gpus(self) -> list[GpuInfo]:
        return list(self._infos)

    # -- per-tick sample -------------------------------------------------------

    def sample(self) -> list[GpuSample]:
        samples = [self._sample_one(index) for index in range(len(self._infos))]
        self._fill_pcie(samples)
        return samples

    def _sample_one(self, index: int) -> GpuSample:
        info = self._infos[index]
        sample = GpuSample(index=index, uuid=info.uuid, timestamp_s=self._wall_clock())
        if index in self._lost:
            sample.lost = True
            return sample
        util, memory, power_mw, enforced_mw, clock_sm, clock_mem, reasons, gen = self._guarded_calls(index, _TICK_CALLS)
        if util is not None:
            sample.util_gpu_pct = float(util.gpu)
            sample.util_mem_pct = float(util.memory)
        if memory is not None:
            sample.mem_used_bytes = int(memory.used)
            sample.mem_total_bytes = int(memory.total)
        sample.power_w = power_mw / 1000 if power_mw is not None else None
        sample.power_cap_enforced_w = enforced_mw / 1000 if enforced_mw is not None else None
        sample.clock_sm_mhz, sample.clock_mem_mhz = clock_sm, clock_mem
        sample.clock_event_reasons = decode_clock_event_reasons(reasons) if reasons is not None else None
        sample.power_cap_w, sample.pcie_replay_count = self._slow_readings(index, enforced_mw)
        busy = util is None or util.gpu > 0 or util.memory > 0
        settled = self._settled_reading(index, busy, sample.mem_used_bytes)
        sample.temperature_c, sample.fan_pct = settled.temperature_c, settled.fan_pct
        sample.pcie_link_gen_current = gen
        sample.pcie_link_width_current = self._link_width(index, gen)
        sample.processes = self._processes(settled)
        sample.energy_j = self._integrate_energy(index, sample.power_w)
        if index in self._lost:  # lost during this tick
            return GpuSample(index=index, uuid=info.uuid, timestamp_s=sample.timestamp_s, lost=True)
        return sample

    def _guarded_calls(self, index: int, calls: tuple[tuple[str, tuple[Any, ...]], ...]) -> list[Any]:
        """`_call(index, name, *args)` for each of CALLS in order, in one frame (issue 13: a Python call per
        reading, 13 a GPU a tick): the same values, the same errors remembered, the same calls asked. The
        clock event reasons' old name is asked, next, only where the new name gave nothing (drivers before 535)."""
        nvml, handle, lost, unsupported = self._nvml, self._handles[index], self._lost, self.unsupported
        values: list[Any] = [None] * len(calls)
        for slot, (name, args) in enumerate(calls):
            value = None
            if index not in lost and (index, name) not in unsupported:
                try:
                    value = getattr(nvml, name)(handle, *args)
                except pynvml.NVMLError_GpuIsLost:
                    lost.add(index)
                except _PERMANENT_ERRORS as error:
                    unsupported[(index, name)] = str(error)
                except AttributeError:  # an older binding without this function
                    unsupported[(index, name)] = "Function Not Found"
                except pynvml.NVMLError:
                    pass  # transient (Timeout, Unknown): ask again next tick
            if name == _EVENT_REASONS:
                if value is None:
                    value = self._call(index, "nvmlDeviceGetCurrentClocksThrottleReasons")
            values[slot] = value
        return values

    def _slow_readings(self, index: int, enforced_mw: int | None) -> tuple[float | None, int | None]:
        """Power-management limit and replay counter, 0.3-0.55 ms each in a Hopper's tick: read on the rare
        schedule (a cap set past a lower enforced constraint; the replay counter, a link-health count) and
        when the enforced limit (6 µs, every tick) moves, as a new cap moves it, at most once a slow interval
        (an enforced limit that wanders by itself must not bring them back every tick). A read that failed
        for now (not unsupported) is asked again after the slow interval, not the rare one."""
        now = self._clock()
        known = self._slow_reads.get(index)
        if known is None or now >= known.due_at_s or (
                enforced_mw != known.enforced_mw and now - known.read_at_s >= self._slow_interval_s):
            limit_mw, replays = values = [self._call(index, name) for name in _SLOW_CALLS]
            failed_for_now = self._failed_for_now(index, _SLOW_CALLS, values)
            known = self._slow_reads[index] = _SlowRead(
                limit_w=limit_mw / 1000 if limit_mw is not None else None, replays=replays, read_at_s=now,
                due_at_s=now + (self._slow_interval_s if failed_for_now else self._rare_interval_s),
                enforced_mw=enforced_mw)
        return known.limit_w, known.replays

    def _link_width(self, index: int, gen: int | None) -> int | None:
        """The link's width now, asked when its generation changes (a retrain) and on the rare schedule:
        ~0.1 ms in a tick on an H200, 17 times the generation's call."""
        now = self._clock()
        known = self._link_widths.get(index)
        if known is None or known[0] != gen or now - known[2] >= self._rare_interval_s:
            known = self._link_widths[index] = (gen, self._call(index, "nvmlDeviceGetCurrPcieLinkWidth"), now)
        return known[1]

    def _integrate_energy(self, index: int, power_w: float | None) -> float | None:
        """Energy since start = integral of power: nvmlDeviceGetTotalEnergyConsumption costs 3.7 ms."""
        now = self._clock()
        last = self._last_sample_at.get(index)
        self._last_sample_at[index] = now
        if power_w is None:
            return self._energy_j.get(index)
        energy = self._energy_j.get(index, 0.0)
        if last is not None:
            energy += power_w * (now - last)
        self._energy_j[index] = energy
        return energy

    def close(self) -> None:
        self._guard_stop.set()
        if self._pcie_fallback_pool is not None:
            self._pcie_fallback_pool.shutdown()
        self._system_call("nvmlShutdown")
