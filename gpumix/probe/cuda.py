"""The CUDA layer: the only module that touches torch, imported lazily. Tests hand the probe a fake
with the same methods that raises what torch raises (no CUDA, out of memory, no peer access)."""

from __future__ import annotations

import time
from typing import Any, Protocol


class NoCudaError(RuntimeError):
    """No torch, or torch without a usable CUDA device: one line, exit 2."""


class CudaLayer(Protocol):
    """Buffers are opaque: uint8 tensors for torch. `device` None means host memory."""

    def device_count(self) -> int: ...

    def uuid(self, device: int) -> str | None: ...  # "GPU-..." as NVML spells it

    def can_access_peer(self, device: int, peer: int) -> bool: ...

    def empty(self, nbytes: int, device: int | None, pinned: bool = False) -> Any: ...

    def from_bytes(self, data: bytes, device: int | None, pinned: bool = False) -> Any: ...

    def to_bytes(self, buffer: Any) -> bytes: ...

    def timed_copies(self, copies: list[tuple[Any, Any]], repeats: int) -> float: ...

    def release(self) -> None: ...


def is_out_of_memory(error: BaseException) -> bool:
    """torch.cuda.OutOfMemoryError is a RuntimeError whose text starts 'CUDA out of memory'."""
    return isinstance(error, MemoryError) or "out of memory" in str(error).lower()


class TorchCuda:
    """CudaLayer over torch. Copies from pinned memory are asynchronous, so copies to several GPUs
    given together overlap (what the all-at-once pass needs); pageable copies are synchronous."""

    def __init__(self) -> None:
        try:
            import torch
        except ImportError:
            raise NoCudaError("torch is not installed: gpumix probe needs it (pip install torch)") from None
        try:
            available = torch.cuda.is_available() and torch.cuda.device_count() > 0
        except RuntimeError as error:  # a broken driver
            raise NoCudaError(f"CUDA is not usable: {str(error).splitlines()[0]}") from None
        if not available:
            raise NoCudaError(f"torch {torch.__version__} sees no CUDA device (a CPU-only build, no driver,"
                              " or CUDA_VISIBLE_DEVICES hides them)")
        self._torch = torch

    def device_count(self) -> int:
        return int(self._torch.cuda.device_count())

    def uuid(self, device: int) -> str | None:
        value = getattr(self._torch.cuda.get_device_properties(device), "uuid", None)
        if value is None:
            return None
        text = str(value)
        return text if text.startswith("GPU-") else f"GPU-{text}"

    def can_access_peer(self, device: int, peer: int) -> bool:
        return bool(self._torch.cuda.can_device_access_peer(device, peer))

    def empty(self, nbytes: int, device: int | None, pinned: bool = False) -> Any:
        torch = self._torch
        if device is None:
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        return torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device}")

    def from_bytes(self, data: bytes, device: int | None, pinned: bool = False) -> Any:
        host = self._torch.frombuffer(bytearray(data), dtype=self._torch.uint8)
        if device is None:
            return host.pin_memory() if pinned else host
        return host.to(f"cuda:{device}")

    def to_bytes(self, buffer: Any) -> bytes:
        return bytes(buffer.cpu().numpy().tobytes())

    def timed_copies(self, copies: list[tuple[Any, Any]], repeats: int) -> float:
        """Seconds for `repeats` rounds of every (dst, src) copy, all devices synchronised."""
        cuda = self._torch.cuda
        # only the devices involved: synchronising another would open a context on it
        devices = {t.device.index for pair in copies for t in pair if t.is_cuda}
        for device in devices:
            cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            for dst, src in copies:
                dst.copy_(src, non_blocking=True)
        for device in devices:
            cuda.synchronize(device)
        return time.perf_counter() - start

    def release(self) -> None:
        self._torch.cuda.empty_cache()
