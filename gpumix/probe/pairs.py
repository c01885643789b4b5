"""Per GPU pair: P2P access as CUDA reports it, correctness of a known pattern copied peer to peer
and through host memory (byte for byte), and bandwidth and latency of the route a copy takes."""

from __future__ import annotations

from typing import Any

from gpumix.probe.cuda import CudaLayer, is_out_of_memory
from gpumix.probe.measure import MIB, compare, latency_s, pattern, rate_bytes_per_s

CHECK_BYTES = 4 * MIB  # the pattern compared byte for byte
BANDWIDTH_BYTES = 64 * MIB
LATENCY_BYTES = 4  # one word: the copy's fixed cost


def probe_pair(cuda: CudaLayer, a: int, b: int, max_bytes_per_gpu: int, slice_s: float) -> dict[str, Any]:
    """Both directions between devices a and b."""
    result: dict[str, Any] = {"gpus": [a, b], "p2p_access": {f"{a}->{b}": cuda.can_access_peer(a, b),
                                                             f"{b}->{a}": cuda.can_access_peer(b, a)}}
    directions = []
    try:
        for src_device, dst_device in ((a, b), (b, a)):
            directions.append(probe_direction(cuda, src_device, dst_device, max_bytes_per_gpu, slice_s / 2))
    except RuntimeError as error:
        if not is_out_of_memory(error):
            raise
        result["skipped"] = "out of GPU or pinned memory"
    finally:
        cuda.release()
    result["directions"] = directions
    return result


def probe_direction(cuda: CudaLayer, src_device: int, dst_device: int, max_bytes_per_gpu: int,
                    slice_s: float) -> dict[str, Any]:
    p2p = cuda.can_access_peer(src_device, dst_device)
    check_bytes = min(CHECK_BYTES, max_bytes_per_gpu // 2)
    expected = pattern(check_bytes)
    src = cuda.from_bytes(expected, src_device)
    direct = cuda.empty(check_bytes, dst_device)
    cuda.timed_copies([(direct, src)], 1)  # peer to peer where CUDA allows it, else staged by CUDA
    staging = cuda.empty(check_bytes, None, pinned=True)
    through_host = cuda.empty(check_bytes, dst_device)
    cuda.timed_copies([(staging, src)], 1)
    cuda.timed_copies([(through_host, staging)], 1)
    checks = {"direct": compare(expected, cuda.to_bytes(direct)),
              "through_host": compare(expected, cuda.to_bytes(through_host))}
    del src, direct, staging, through_host
    size = min(BANDWIDTH_BYTES, max_bytes_per_gpu // 2)
    src, dst = cuda.empty(size, src_device), cuda.empty(size, dst_device)
    bandwidth = rate_bytes_per_s(cuda, [(dst, src)], size, slice_s * 0.8)
    del src, dst
    small_src, small_dst = cuda.empty(LATENCY_BYTES, src_device), cuda.empty(LATENCY_BYTES, dst_device)
    latency = latency_s(cuda, small_dst, small_src, slice_s * 0.2)
    return {"from": src_device, "to": dst_device, "route": "p2p" if p2p else "host",
            "checks": checks, "size_bytes": size, "bytes_per_s": bandwidth, "latency_s": latency}


FIX_WRONG_P2P = ("train with NCCL_P2P_DISABLE=1 now; then a driver that supports P2P on these cards (a patched"
                 " P2P driver needs Resizable BAR on and the IOMMU off: iommu=off or amd_iommu=off, ACS disabled)")


def pair_findings(pair: dict[str, Any], driver_version: str | None) -> list[dict[str, Any]]:
    """A wrong direct copy beside a right one through host memory is P2P corrupting data; both wrong
    is a fault of memory or link."""
    found = []
    driver = driver_version or "unknown"
    for direction in pair.get("directions", []):
        direct, host = direction["checks"]["direct"], direction["checks"]["through_host"]
        route = f"GPU {direction['from']} -> GPU {direction['to']}"
        if not direct["correct"] and host["correct"]:
            what = "zeros" if direct.get("all_zeros") else f"{direct['differing_bytes']} wrong bytes"
            found.append({"severity": "error", "code": "p2p_copy_wrong", "gpus": [direction["from"], direction["to"]],
                          "message": f"a {direction['route']} copy {route} returned {what} (first at byte"
                                     f" {direct['first_offset']}) while the copy through host memory was"
                                     f" right; driver {driver}",
                          "fix": FIX_WRONG_P2P})
        elif not host["correct"]:
            found.append({"severity": "error", "code": "copy_wrong", "gpus": [direction["from"], direction["to"]],
                          "message": f"copies {route} are wrong even through host memory"
                                     f" ({host['differing_bytes']} bytes); driver {driver}",
                          "fix": "run a GPU memory test on both cards and check the risers; do not train on this pair"})
    return found
