"""One real GPU read as N (issue 13): what the N-th GPU adds to a tick, measured on a machine with one GPU.

A hub's tick reads its GPUs one after the other, so most of what a first GPU costs once a second (its
Python and NVML's first call, both run cold after a second's sleep) is paid once a tick, not once a GPU:
on the 2-core box with a stub NVML whose calls cost nothing, a tick's reading took 180-200 µs for one GPU
and 258 µs for ten. Ten times a one-GPU reading overstates ten GPUs. `AliasNvml` gives NvmlBackend N
devices that are the machine's real ones in turn (index mod the real count): every call is a real NVML
call on a real GPU. What it cannot show is a second GPU's own driver state, cold where the alias's is
warm, so the N-GPU figure it gives is a floor, and N times the one-GPU figure a ceiling.

Read-only like the backend's reads; the UUIDs and bus ids of aliases past the real count carry a suffix
so that the hub keeps them apart.
"""

from __future__ import annotations

from typing import Any

import pynvml

from gpumix.hw.nvml_topology import _text  # NVML's strings come as str or bytes, by binding version


class AliasHandle:
    """Device `index` of the aliased set: the real handle it reads through."""

    __slots__ = ("index", "real")

    def __init__(self, index: int, real: Any) -> None:
        self.index, self.real = index, real


class AliasNvml:
    """pynvml (or `base`, an object with its functions) with `count` devices, each a real one in turn."""

    def __init__(self, count: int, base: Any = pynvml) -> None:
        self._base = base
        self._count = count
        self._real_count: int | None = None

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802 (NVML's names)
        self._real_count = self._base.nvmlDeviceGetCount()
        return self._count if self._real_count else 0

    def nvmlDeviceGetHandleByIndex(self, index: int) -> AliasHandle:  # noqa: N802
        real_count = self._real_count or self._base.nvmlDeviceGetCount()
        return AliasHandle(index, self._base.nvmlDeviceGetHandleByIndex(index % real_count))

    def nvmlDeviceGetUUID(self, handle: AliasHandle) -> str:  # noqa: N802
        uuid = _text(self._base.nvmlDeviceGetUUID(handle.real))
        return uuid if handle.index < (self._real_count or 1) else f"{uuid}-alias{handle.index}"

    def nvmlDeviceGetPciInfo(self, handle: AliasHandle) -> Any:  # noqa: N802
        info = self._base.nvmlDeviceGetPciInfo(handle.real)
        if handle.index >= (self._real_count or 1):
            info.busId = f"{_text(info.busId)}.{handle.index}".encode()
        return info

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._base, name)
        if not callable(real) or not name.startswith("nvml"):
            return real

        def on_real(*args: Any, **kwargs: Any) -> Any:
            return real(*(arg.real if isinstance(arg, AliasHandle) else arg for arg in args), **kwargs)
        setattr(self, name, on_real)  # found directly from now on (the same wrapper cost for 1 and N aliases)
        return on_real
