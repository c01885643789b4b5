"""Per GPU: host->device and device->host bandwidth, pinned and pageable, at a few sizes, against
the link's theoretical rate; then all GPUs at once, against the sum (a shared uplink shows)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpumix.hw.pcie import link_bytes_per_s, link_label
from gpumix.probe.measure import MIB, rate_bytes_per_s

if TYPE_CHECKING:  # the hub's advisor reads this module's thresholds: the CUDA layer loads where a probe runs
    from gpumix.probe.cuda import CudaLayer

SIZES_BYTES = (1 * MIB, 16 * MIB, 256 * MIB)
# A copy moves ~92 % of the link's line rate: on the H200 a 55 GB/s copy read 59.4 GB/s on the
# link's own counters (docs/hardware.md).
PROTOCOL_EFFICIENCY = 0.92
SLOW_SHARE = 0.5  # a link delivering less than half of what its class should is flagged
SHARED_SHARE = 0.75  # all at once below 3/4 of the sum: the GPUs share an uplink

LinkNow = Callable[[int], tuple[int | None, int | None]]  # NVML index -> (gen, width) right now


def sizes_within(max_bytes_per_gpu: int) -> list[int]:
    """The sizes whose device buffer fits in the memory budget (the smallest always)."""
    return [size for size in SIZES_BYTES if size <= max_bytes_per_gpu] or [min(SIZES_BYTES[0], max_bytes_per_gpu)]


def probe_gpu(cuda: CudaLayer, device: int, gpu: dict[str, Any], link_now: LinkNow,
              max_bytes_per_gpu: int, slice_s: float) -> dict[str, Any]:
    """The copies of one GPU and its link's verdict. `gpu` holds the NVML facts (index, gen/width max)."""
    sizes = sizes_within(max_bytes_per_gpu)
    each_s = slice_s / (4 * len(sizes))
    copies: list[dict[str, Any]] = []
    notes: list[str] = []
    gen_now = width_now = None
    for size in sizes:
        try:
            device_buffer = cuda.empty(size, device)
            for memory in ("pinned", "pageable"):
                host = cuda.empty(size, None, pinned=memory == "pinned")
                for direction, pair in (("h2d", (device_buffer, host)), ("d2h", (host, device_buffer))):
                    rate = rate_bytes_per_s(cuda, [pair], size, each_s)
                    copies.append({"direction": direction, "memory": memory, "size_bytes": size,
                                   "bytes_per_s": rate})
                    if direction == "h2d" and memory == "pinned" and size == sizes[-1]:
                        gen_now, width_now = link_now(gpu["nvml_index"])  # read under load: idle links downshift
                del host
            del device_buffer
        except RuntimeError as error:
            from gpumix.probe.cuda import is_out_of_memory

            if not is_out_of_memory(error):
                raise
            notes.append(f"{size // MIB} MiB: out of GPU or pinned memory, skipped")
            break
    cuda.release()
    return {**verdict(gpu, copies, gen_now, width_now), "copies": copies, "notes": notes}


def best(copies: list[dict[str, Any]], direction: str) -> float | None:
    rates = [c["bytes_per_s"] for c in copies if c["direction"] == direction and c["memory"] == "pinned"]
    return max(rates) if rates else None


def verdict(gpu: dict[str, Any], copies: list[dict[str, Any]], gen_now: int | None,
            width_now: int | None) -> dict[str, Any]:
    """The link negotiated under load against its class (what GPU and slot can do), and the best
    pinned copy against the negotiated link's theoretical rate less the protocol overhead."""
    class_rate = link_bytes_per_s(gpu.get("pcie_gen_max"), gpu.get("pcie_width_max"))
    now_rate = link_bytes_per_s(gen_now, width_now)
    best_h2d, best_d2h = best(copies, "h2d"), best(copies, "d2h")
    delivered = max((r for r in (best_h2d, best_d2h) if r is not None), default=None)
    expected = now_rate * PROTOCOL_EFFICIENCY if now_rate else None
    return {
        "link_now": link_label(gen_now, width_now),
        "link_max": link_label(gpu.get("pcie_gen_max"), gpu.get("pcie_width_max")),
        "link_theoretical_bytes_per_s": now_rate,
        "class_theoretical_bytes_per_s": class_rate,
        "expected_bytes_per_s": expected,
        "best_h2d_bytes_per_s": best_h2d,
        "best_d2h_bytes_per_s": best_d2h,
        "share_of_expected": delivered / expected if delivered and expected else None,
        "share_of_class": delivered / (class_rate * PROTOCOL_EFFICIENCY) if delivered and class_rate else None,
    }


def link_findings(gpu_result: dict[str, Any]) -> list[dict[str, Any]]:
    """Below its class (a downgraded slot or riser), or slow on the link it has."""
    found = []
    name = f"GPU {gpu_result['gpu']}"
    if gpu_result["link_now"] != gpu_result["link_max"] and "?" not in gpu_result["link_now"]:
        found.append({"severity": "warning", "code": "link_below_class", "gpus": [gpu_result["gpu"]],
                      "message": f"{name} ran its copies at PCIe {gpu_result['link_now']}, below the"
                                 f" {gpu_result['link_max']} that GPU and slot can do",
                      "fix": "reseat the card or its riser, use a full-width CPU slot, check the BIOS's"
                             " PCIe generation setting"})
    share = gpu_result.get("share_of_expected")
    if share is not None and share < SLOW_SHARE:
        found.append({"severity": "warning", "code": "link_slow", "gpus": [gpu_result["gpu"]],
                      "message": f"{name} delivered {share:.0%} of what a PCIe {gpu_result['link_now']} link"
                                 " should (theoretical less 8 % protocol overhead)",
                      "fix": "look for a chipset slot, a PCIe switch or riser in the path, or another"
                             " process copying at the same time"})
    return found


def probe_all_at_once(cuda: CudaLayer, devices: list[int], singles: dict[int, float],
                      max_bytes_per_gpu: int, slice_s: float) -> dict[str, Any]:
    """Pinned host->device copies to every GPU together, against the sum of each alone."""
    size = sizes_within(max_bytes_per_gpu)[-1]
    try:
        pairs = [(cuda.empty(size, device), cuda.empty(size, None, pinned=True)) for device in devices]
        aggregate = rate_bytes_per_s(cuda, pairs, size, slice_s)
    except RuntimeError as error:
        from gpumix.probe.cuda import is_out_of_memory

        if not is_out_of_memory(error):
            raise
        return {"skipped": "out of GPU or pinned memory"}
    finally:
        pairs = []
        cuda.release()
    total = sum(singles.get(device, 0.0) for device in devices)
    return {"gpus": devices, "size_bytes": size, "aggregate_bytes_per_s": aggregate,
            "sum_of_singles_bytes_per_s": total, "share_of_sum": aggregate / total if total else None}


def shared_uplink_findings(together: dict[str, Any]) -> list[dict[str, Any]]:
    share = together.get("share_of_sum")
    if share is None or share >= SHARED_SHARE:
        return []
    return [{"severity": "warning", "code": "shared_uplink", "gpus": together["gpus"],
             "message": f"GPUs {', '.join(map(str, together['gpus']))} together moved {share:.0%} of what"
                        " each moves alone: they share an uplink (chipset, PCIe switch or one CPU socket)",
             "fix": "spread the cards over CPU-attached slots; expect the all-reduce through host memory"
                    " to be bound by that uplink"}]
