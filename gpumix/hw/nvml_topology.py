"""Topology from NVML, for NvmlBackend: P2P read/write status, the common PCIe ancestor of each
pair and their NVLinks (direct, or through NVSwitches), read once.

What it may import: pynvml, gpumix.hw."""

from __future__ import annotations

from typing import Any

import pynvml

from gpumix.hw.types import P2PLink

# nvidia-ml-py 13.x defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,) (a
# trailing comma in the binding); passing it raises a ctypes error. Use ints.
P2P_INDEX_READ = 0
P2P_INDEX_WRITE = 1

P2P_STATUS = {
    0: "OK",
    1: "chipset not supported",
    2: "GPU not supported",
    3: "topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}

# nvmlDeviceGetTopologyCommonAncestor levels, named as `nvidia-smi topo -m` names them.
TOPOLOGY_LEVEL = {0: "BOARD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def _bus_key(bus_id: str) -> str:
    """"00000000:18:00.0" and "0000:18:00.0" name the same device: compare bus:device.function."""
    return bus_id.strip().lower()[-12:]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class NvmlTopology:
    """P2P and NVLink, a part of NvmlBackend (uses its `_nvml`, `_handles`, `_infos`, `_lost` and `_call`)."""

    def p2p(self) -> list[P2PLink]:
        links = []
        count = len(self._infos)
        by_bus = {_bus_key(info.pci_bus_id): info.index for info in self._infos if info.pci_bus_id}
        nvlinks = {index: self._nvlinks(index, by_bus) for index in range(count) if index not in self._lost}
        for a in range(count):
            for b in range(a + 1, count):
                links.append(self._p2p_pair(a, b, nvlinks))
        return links

    def _p2p_pair(self, a: int, b: int, nvlinks: dict[int, tuple[dict[int, int], int]]) -> P2PLink:
        if a in self._lost or b in self._lost:
            return P2PLink(a, b, None, None, None)
        read = self._pair_call(a, b, "nvmlDeviceGetP2PStatus", P2P_INDEX_READ)
        write = self._pair_call(a, b, "nvmlDeviceGetP2PStatus", P2P_INDEX_WRITE)
        level = self._pair_call(a, b, "nvmlDeviceGetTopologyCommonAncestor")
        (direct_a, switch_a), (_, switch_b) = nvlinks[a], nvlinks[b]
        # direct links (a bridge), or through NVSwitches, where each GPU's links reach every other
        # GPU on the switches (an HGX board: NV18)
        count = direct_a.get(b, 0) + min(switch_a, switch_b)
        return P2PLink(
            gpu_a=a,
            gpu_b=b,
            read=P2P_STATUS.get(read, str(read)) if read is not None else None,
            write=P2P_STATUS.get(write, str(write)) if write is not None else None,
            # as `nvidia-smi topo -m` names a pair joined by NVLink
            topology=f"NV{count}" if count else TOPOLOGY_LEVEL.get(level, str(level)) if level is not None else None,
            nvlinks=count,
        )

    def _nvlinks(self, index: int, by_bus: dict[str, int]) -> tuple[dict[int, int], int]:
        """(links to each other GPU by its PCI bus id, links to NVSwitches) of GPU `index`.
        A card without NVLink answers NotSupported for link 0; links past its last, InvalidArgument."""
        direct: dict[int, int] = {}
        switch = 0
        handle = self._handles[index]
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                if self._nvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                    continue
                remote_type = self._call(index, "nvmlDeviceGetNvLinkRemoteDeviceType", link)  # older drivers: None
                if remote_type == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                    switch += 1
                    continue
                remote = self._nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
            except pynvml.NVMLError as error:
                if link == 0 and error.value == pynvml.NVML_ERROR_NOT_SUPPORTED:
                    break
                continue
            except AttributeError:  # an NVML without these functions
                break
            peer = by_bus.get(_bus_key(_text(remote.busId)))
            if peer is not None and peer != index:
                direct[peer] = direct.get(peer, 0) + 1
        return direct, switch


    def _pair_call(self, a: int, b: int, name: str, *args: Any) -> Any:
        """A guarded NVML call about GPUs a and b: the value, or None. Its error
        (GpuIsLost, NotSupported) may be about either GPU, so unlike `_call` it
        marks neither lost nor unsupported; the next sample() finds a lost GPU.
        Not remembering costs little: the topology is read once, not every tick."""
        try:
            return getattr(self._nvml, name)(self._handles[a], self._handles[b], *args)
        except (pynvml.NVMLError, AttributeError):
            return None
