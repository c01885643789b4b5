"""Timing one kind of copy within a slice of the time budget, and the known pattern."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a type only: the hub's advisor reads MIB without loading the CUDA layer's Protocol
    from gpumix.probe.cuda import CudaLayer

MIB = 1024**2
MAX_REPEATS = 50


def rate_bytes_per_s(cuda: CudaLayer, copies: list[tuple[Any, Any]], nbytes_each: int, slice_s: float) -> float:
    """Bytes/s over all `copies` together: one warm-up round, one timed round to size the repeats,
    then as many rounds as fit in `slice_s` (at least 1, at most MAX_REPEATS)."""
    cuda.timed_copies(copies, 1)
    first_s = max(cuda.timed_copies(copies, 1), 1e-9)
    repeats = max(1, min(MAX_REPEATS, int(slice_s / first_s)))
    seconds = max(cuda.timed_copies(copies, repeats), 1e-9)
    return nbytes_each * len(copies) * repeats / seconds


def latency_s(cuda: CudaLayer, dst: Any, src: Any, slice_s: float) -> float:
    """Seconds per small copy, from as many as fit in `slice_s` (at most 1000)."""
    cuda.timed_copies([(dst, src)], 1)
    first_s = max(cuda.timed_copies([(dst, src)], 1), 1e-9)
    repeats = max(1, min(1000, int(slice_s / first_s)))
    return cuda.timed_copies([(dst, src)], repeats) / repeats


def pattern(nbytes: int) -> bytes:
    """A known pseudo-random pattern (no zeros run, no short period): a wrong copy cannot match it."""
    import hashlib  # here: hashlib maps OpenSSL, and the probe's screen loads this module

    block = hashlib.shake_128(b"gpumix probe pattern").digest(min(nbytes, MIB))
    return (block * (nbytes // len(block) + 1))[:nbytes]


def compare(expected: bytes, got: bytes) -> dict[str, Any]:
    """How a copy differs from the pattern: differing bytes, the first offset, all zeros or not."""
    if got == expected:
        return {"correct": True}
    differing = sum(1 for a, b in zip(expected, got, strict=False) if a != b) + abs(len(expected) - len(got))
    first = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), min(len(expected), len(got)))
    return {"correct": False, "differing_bytes": differing, "first_offset": first,
            "all_zeros": not any(got)}
