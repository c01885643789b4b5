"""Plain records the hardware layer produces. Units sit in field names.

`None` means "not available" (NVML said NotSupported, NoPermission, ...): it
prints as N/A and is skipped by arithmetic, never raised into the UI.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

GIB = 1024**3


@dataclass(frozen=True)
class DriverInfo:
    driver_version: str | None
    cuda_driver_version: str | None  # "12.8", from nvmlSystemGetCudaDriverVersion
    nvml_version: str | None = None


@dataclass(frozen=True)
class GpuInfo:
    """Static facts about one GPU, read once at start (nvidia-smi -q)."""

    index: int
    uuid: str
    name: str
    brand: str | None
    pci_bus_id: str | None
    mem_total_bytes: int | None
    power_limit_min_w: float | None
    power_limit_max_w: float | None
    power_limit_default_w: float | None
    pcie_gen_max_gpu: int | None  # what the GPU can do
    pcie_gen_max: int | None  # what GPU and slot together can do
    pcie_width_max: int | None  # GPU and slot together (an x4 riser says 4)

    @property
    def model(self) -> str:
        """Short model name: 'NVIDIA GeForce RTX 3090' -> 'RTX 3090'."""
        short = self.name
        for prefix in ("NVIDIA ", "GeForce "):
            short = short.removeprefix(prefix)
        return short

    @property
    def tier(self) -> str:
        """Cards of one model and VRAM size behave alike: 'RTX 3060 12G'."""
        if self.mem_total_bytes is None:
            return self.model
        return f"{self.model} {round(self.mem_total_bytes / GIB)}G"


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    gpu_mem_bytes: int | None


@dataclass
class GpuSample:
    """One tick's readings of one GPU (nvidia-smi --query-gpu=... equivalents)."""

    index: int
    uuid: str
    timestamp_s: float
    lost: bool = False
    util_gpu_pct: float | None = None  # utilization.gpu
    util_mem_pct: float | None = None  # utilization.memory
    mem_used_bytes: int | None = None  # memory.used
    mem_total_bytes: int | None = None  # memory.total
    power_w: float | None = None  # power.draw
    power_cap_w: float | None = None  # power.limit
    power_cap_enforced_w: float | None = None  # enforced.power.limit
    temperature_c: float | None = None  # temperature.gpu
    fan_pct: float | None = None  # fan.speed
    clock_sm_mhz: float | None = None  # clocks.sm
    clock_mem_mhz: float | None = None  # clocks.mem
    clock_event_reasons: list[str] | None = None  # clocks_event_reasons.*, decoded
    pcie_link_gen_current: int | None = None  # pcie.link.gen.current
    pcie_link_width_current: int | None = None  # pcie.link.width.current
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    # how old the counter reading behind those rates is: 0 read this tick; more where carried unread (a quiet
    # GPU, or a busy one no dashboard views: gpumix/hw/nvml_pcie.py); None without a rate
    pcie_rates_age_s: float | None = None
    pcie_replay_count: int | None = None
    energy_j: float | None = None  # since the sampler started, integrated from power
    processes: list[GpuProcess] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class P2PLink:
    """Peer-to-peer status between two GPUs (nvidia-smi topo -p2p r / -p2p w, topo -m)."""

    gpu_a: int
    gpu_b: int
    read: str | None  # "OK", "GPU not supported", ...
    write: str | None
    topology: str | None  # "NV4" (4 NVLinks), "PIX", "PXB", "PHB", "NODE", "SYS", ...
    nvlinks: int = 0  # active NVLink links between the two


class HardwareBackend(Protocol):
    """What the hub needs from the hardware. Implemented by NVML and by the simulator."""

    def driver_info(self) -> DriverInfo: ...

    def gpus(self) -> list[GpuInfo]: ...

    def sample(self) -> list[GpuSample]: ...

    def p2p(self) -> list[P2PLink]: ...

    def close(self) -> None: ...


class NoDriverError(RuntimeError):
    """No NVIDIA driver or NVML library: the user gets one line and a hint."""
