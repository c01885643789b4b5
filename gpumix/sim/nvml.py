"""An NVML look-alike over a SimMachine: the pynvml functions the NVML backend
calls, with the same arguments, units (mW, KB/s, bytes) and the real pynvml
error classes. The NVML backend runs unchanged on it, so the simulated rig
exercises the same code (and error paths) as real GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pynvml

from gpumix.sim.machine import SimMachine

COUNTER_MODULUS = 1 << 32
# NVML stamps field values with the wall clock (us since 1970), not the monotonic clock
# samplers schedule by: keep the two apart here too.
FIELD_EPOCH_OFFSET_S = 1_700_000_000.0
_P2P_OK = 0
_GPU_NOT_SUPPORTED = 2  # P2P status: GeForce cards refuse peer-to-peer
_TOPOLOGY_HOSTBRIDGE = 30
_TOPOLOGY_SYSTEM = 50
_TOPOLOGY_MULTIPLE_SWITCHES = 20


@dataclass(frozen=True)
class SimHandle:
    index: int


class SimNvml:
    """pynvml's module interface, as far as gpumix uses it."""

    def __init__(self, machine: SimMachine) -> None:
        self.machine = machine
        self.initialized = False

    # -- plumbing -------------------------------------------------------------

    def _check(self, handle: SimHandle, function: str) -> int:
        if not self.initialized:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        index = handle.index
        machine = self.machine
        if index in machine.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        fault = machine.faults.get((index, function))
        if fault is not None:
            raise pynvml.NVMLError(fault)
        if function in machine.gpus[index].spec.model.unsupported_calls:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return index

    # -- system -----------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.machine.rig.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        major, minor = self.machine.rig.cuda_driver_version.split(".")
        return int(major) * 1000 + int(minor) * 10

    def nvmlSystemGetNVMLVersion(self) -> str:
        return f"{self.nvmlSystemGetCudaDriverVersion() // 1000}.{self.machine.rig.driver_version}"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.machine.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimHandle:
        if not 0 <= index < len(self.machine.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return SimHandle(index)

    # -- static facts --------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: SimHandle) -> str:
        return self.machine.gpus[self._check(handle, "nvmlDeviceGetName")].spec.model.name

    def nvmlDeviceGetUUID(self, handle: SimHandle) -> str:
        return self.machine.gpus[self._check(handle, "nvmlDeviceGetUUID")].spec.uuid

    def nvmlDeviceGetBrand(self, handle: SimHandle) -> int:
        self._check(handle, "nvmlDeviceGetBrand")
        return pynvml.NVML_BRAND_GEFORCE

    def nvmlDeviceGetPciInfo(self, handle: SimHandle) -> Any:
        spec = self.machine.gpus[self._check(handle, "nvmlDeviceGetPciInfo")].spec
        return SimpleNamespace(busId=spec.pci_bus_id)

    def nvmlDeviceGetMemoryInfo(self, handle: SimHandle) -> Any:
        gpu = self.machine.gpus[self._check(handle, "nvmlDeviceGetMemoryInfo")]
        total = int(gpu.spec.model.mem_gib * 1024**3)
        used = min(total, gpu.activity.mem_used_bytes)
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: SimHandle) -> list[int]:
        model = self.machine.gpus[self._check(handle, "nvmlDeviceGetPowerManagementLimitConstraints")].spec.model
        return [int(model.power_limit_min_w * 1000), int(model.power_limit_max_w * 1000)]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: SimHandle) -> int:
        model = self.machine.gpus[self._check(handle, "nvmlDeviceGetPowerManagementDefaultLimit")].spec.model
        return int(model.tdp_w * 1000)

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: SimHandle) -> int:
        return self.machine.gpus[self._check(handle, "nvmlDeviceGetGpuMaxPcieLinkGeneration")].spec.model.pcie_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: SimHandle) -> int:
        return self.machine.gpus[self._check(handle, "nvmlDeviceGetMaxPcieLinkGeneration")].spec.link_gen_max

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: SimHandle) -> int:
        return self.machine.gpus[self._check(handle, "nvmlDeviceGetMaxPcieLinkWidth")].spec.link_width_max

    # -- readings ---------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: SimHandle) -> Any:
        index = self._check(handle, "nvmlDeviceGetUtilizationRates")
        util = self.machine.util_pct(index)
        return SimpleNamespace(gpu=int(util), memory=int(util * 0.6))

    def nvmlDeviceGetPowerUsage(self, handle: SimHandle) -> int:
        return int(self.machine.power_w(self._check(handle, "nvmlDeviceGetPowerUsage")) * 1000)

    def nvmlDeviceGetPowerManagementLimit(self, handle: SimHandle) -> int:
        index = self._check(handle, "nvmlDeviceGetPowerManagementLimit")
        return int(self.machine.gpus[index].power_cap_w * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: SimHandle) -> int:
        index = self._check(handle, "nvmlDeviceGetEnforcedPowerLimit")
        return int(self.machine.gpus[index].power_cap_w * 1000)

    def nvmlDeviceGetTemperature(self, handle: SimHandle, sensor: int) -> int:
        return int(self.machine.temperature_c(self._check(handle, "nvmlDeviceGetTemperature")))

    def nvmlDeviceGetFanSpeed(self, handle: SimHandle) -> int:
        index = self._check(handle, "nvmlDeviceGetFanSpeed")
        if not self.machine.gpus[index].spec.model.has_fan:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(30 + 0.6 * max(0.0, self.machine.temperature_c(index) - 40))

    def nvmlDeviceGetClockInfo(self, handle: SimHandle, clock_type: int) -> int:
        index = self._check(handle, "nvmlDeviceGetClockInfo")
        if clock_type == pynvml.NVML_CLOCK_SM:
            return self.machine.sm_clock_mhz(index)
        return self.machine.mem_clock_mhz(index)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: SimHandle) -> int:
        index = self._check(handle, "nvmlDeviceGetCurrentClocksEventReasons")
        if not self.machine.is_busy(index):
            return pynvml.nvmlClocksEventReasonGpuIdle
        reasons = 0
        if self.machine.power_capped(index):
            reasons |= pynvml.nvmlClocksEventReasonSwPowerCap
        if self.machine.temperature_c(index) >= 83:
            reasons |= pynvml.nvmlClocksEventReasonSwThermalSlowdown
        return reasons

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: SimHandle) -> int:
        return self.machine.link_gen_current(self._check(handle, "nvmlDeviceGetCurrPcieLinkGeneration"))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: SimHandle) -> int:
        return self.machine.gpus[self._check(handle, "nvmlDeviceGetCurrPcieLinkWidth")].spec.link_width_max

    def nvmlDeviceGetFieldValues(self, handle: SimHandle, field_ids: list[int]) -> list[Any]:
        """Like an H200 on driver 580: the PCIe byte counters are 32-bit and wrap every 4.29 GB."""
        index = self._check(handle, "nvmlDeviceGetFieldValues")
        timestamp_s, tx, rx = self.machine.pcie_counters(index)
        by_field = {pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: tx, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: rx}
        values = []
        for field_id in field_ids:
            known = field_id in by_field
            wrapped = int(by_field.get(field_id, 0)) % COUNTER_MODULUS
            values.append(
                SimpleNamespace(
                    fieldId=field_id,
                    timestamp=int((timestamp_s + FIELD_EPOCH_OFFSET_S) * 1e6),
                    nvmlReturn=pynvml.NVML_SUCCESS if known else pynvml.NVML_ERROR_NOT_SUPPORTED,
                    valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                    value=SimpleNamespace(uiVal=wrapped, ullVal=wrapped),
                )
            )
        return values

    def nvmlDeviceGetPcieThroughput(self, handle: SimHandle, counter: int) -> int:
        """KB/s over the last 20 ms (the real call blocks for that long; we don't)."""
        index = self._check(handle, "nvmlDeviceGetPcieThroughput")
        activity = self.machine.gpus[index].activity
        rate = activity.pcie_tx_bytes_per_s if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else activity.pcie_rx_bytes_per_s
        return int(rate / 1000)

    def nvmlDeviceGetPcieReplayCounter(self, handle: SimHandle) -> int:
        self._check(handle, "nvmlDeviceGetPcieReplayCounter")
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle: SimHandle) -> list[Any]:
        gpu = self.machine.gpus[self._check(handle, "nvmlDeviceGetComputeRunningProcesses")]
        share = gpu.activity.mem_used_bytes // max(1, len(gpu.activity.pids))
        return [SimpleNamespace(pid=pid, usedGpuMemory=share) for pid in gpu.activity.pids]

    def nvmlDeviceGetNvLinkState(self, handle: SimHandle, link: int) -> int:
        spec = self.machine.gpus[self._check(handle, "nvmlDeviceGetNvLinkState")].spec
        if spec.nvlink_peer is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < spec.nvlink_links:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: SimHandle, link: int) -> int:
        self.nvmlDeviceGetNvLinkState(handle, link)
        return pynvml.NVML_NVLINK_DEVICE_TYPE_GPU  # bridges join GPUs; NVSwitch boards are not simulated

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: SimHandle, link: int) -> Any:
        self.nvmlDeviceGetNvLinkState(handle, link)
        spec = self.machine.gpus[handle.index].spec
        return SimpleNamespace(busId=self.machine.gpus[spec.nvlink_peer].spec.pci_bus_id.encode())

    def nvmlDeviceGetP2PStatus(self, handle_a: SimHandle, handle_b: SimHandle, index: int) -> int:
        if not isinstance(index, int):  # the real binding fails the same way on the (0,) tuple
            raise TypeError("p2pIndex must be an int")
        self._check(handle_a, "nvmlDeviceGetP2PStatus")
        self._check(handle_b, "nvmlDeviceGetP2PStatus")
        bridged = self.machine.gpus[handle_a.index].spec.nvlink_peer == handle_b.index  # P2P runs over the bridge
        return _P2P_OK if self.machine.rig.p2p_supported or bridged else _GPU_NOT_SUPPORTED

    def nvmlDeviceGetTopologyCommonAncestor(self, handle_a: SimHandle, handle_b: SimHandle) -> int:
        a = self.machine.gpus[self._check(handle_a, "nvmlDeviceGetTopologyCommonAncestor")].spec
        b = self.machine.gpus[self._check(handle_b, "nvmlDeviceGetTopologyCommonAncestor")].spec
        if a.behind_chipset and b.behind_chipset:
            return _TOPOLOGY_MULTIPLE_SWITCHES  # both under the chipset's switch
        if a.behind_chipset or b.behind_chipset:
            return _TOPOLOGY_SYSTEM
        return _TOPOLOGY_HOSTBRIDGE

    # -- control ------------------------------------------------------------------------

    def nvmlDeviceSetPowerManagementLimit(self, handle: SimHandle, limit_mw: int) -> None:
        index = self._check(handle, "nvmlDeviceSetPowerManagementLimit")
        model = self.machine.gpus[index].spec.model
        if not model.power_limit_min_w * 1000 <= limit_mw <= model.power_limit_max_w * 1000:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.machine.set_power_cap_w(index, limit_mw / 1000)
