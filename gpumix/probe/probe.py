"""One probe run: which GPUs may be probed (never one another process is busy on, unless forced),
the time and memory budgets, the parts in order, and the findings. It changes no GPU setting: it
only allocates memory and copies."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpumix.hw.pcie import link_label
from gpumix.hw.types import GpuInfo, GpuSample
from gpumix.probe import allreduce, links, pairs
from gpumix.probe.cuda import CudaLayer
from gpumix.probe.measure import MIB

DEFAULT_MAX_BYTES_PER_GPU = 1024 * MIB
DEFAULT_TIME_LIMIT_S = 30.0
BUSY_UTIL_PCT = 10.0  # above this, someone else is computing on the GPU
DEFAULT_ALLREDUCE_BYTES = 256 * MIB
# shares of the time budget; the all-reduce's worker processes take what is left
LINKS_SHARE, TOGETHER_SHARE, PAIRS_SHARE = 0.35, 0.1, 0.2


@dataclass
class ProbeOptions:
    gpus: list[int] | None = None  # NVML indices; None: all
    force: bool = False
    max_bytes_per_gpu: int = DEFAULT_MAX_BYTES_PER_GPU
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    allreduce_bytes: int = DEFAULT_ALLREDUCE_BYTES
    allreduce: bool = True


class Nvml:
    """What the probe reads from NVML: the facts, a sample (processes, utilisation, the link now)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def gpus(self) -> list[GpuInfo]:
        return self.backend.gpus()

    def sample(self) -> list[GpuSample]:
        return self.backend.sample()

    def driver_version(self) -> str | None:
        return self.backend.driver_info().driver_version

    def link_now(self, index: int) -> tuple[int | None, int | None]:
        call = getattr(self.backend, "_call", None)  # one read, not a whole sample, while copies run
        if call is None:
            sample = self.sample()[index]
            return sample.pcie_link_gen_current, sample.pcie_link_width_current
        return call(index, "nvmlDeviceGetCurrPcieLinkGeneration"), call(index, "nvmlDeviceGetCurrPcieLinkWidth")


def busy_reason(sample: GpuSample, own_pid: int) -> str | None:
    others = [p.pid for p in sample.processes if p.pid != own_pid]
    if others:
        return f"process {', '.join(map(str, others[:4]))} uses it"
    if sample.util_gpu_pct is not None and sample.util_gpu_pct > BUSY_UTIL_PCT:
        return f"{sample.util_gpu_pct:.0f} % utilised"
    return None


def machine_facts(gpus: list[GpuInfo], driver_version: str | None) -> dict[str, Any]:
    """What a result is true of (its key in the store): a hub holding GpuInfo and the driver can
    look up the kept result with `store.load(machine_facts(...))` without running anything."""
    return {"driver_version": driver_version,
            "gpus": [{"nvml_index": g.index, "uuid": g.uuid, "name": g.name, "pci_bus_id": g.pci_bus_id,
                      "pcie_gen_max": g.pcie_gen_max, "pcie_width_max": g.pcie_width_max,
                      "link_max": link_label(g.pcie_gen_max, g.pcie_width_max)} for g in gpus]}


def machine_of(nvml: Nvml) -> dict[str, Any]:
    return machine_facts(nvml.gpus(), nvml.driver_version())


def choose_gpus(nvml: Nvml, options: ProbeOptions, say: Callable[[str], None]) -> tuple[list[int], list[dict[str, Any]]]:
    """The NVML indices to probe, and the refused ones with why (before any CUDA context exists)."""
    samples = {s.index: s for s in nvml.sample()}
    wanted = options.gpus if options.gpus is not None else sorted(samples)
    chosen, refused = [], []
    for index in wanted:
        sample = samples.get(index)
        reason = "no such GPU" if sample is None else "lost" if sample.lost else busy_reason(sample, os.getpid())
        if reason and (options.force and sample is not None and not sample.lost):
            say(f"GPU {index}: {reason}; probing it anyway (--force)")
            reason = None
        if reason:
            refused.append({"gpu": index, "reason": reason})
            say(f"GPU {index} not probed: {reason}" + ("" if sample is None or sample.lost else " (--force probes it anyway)"))
        else:
            chosen.append(index)
    return chosen, refused


def cuda_devices(cuda: CudaLayer, machine: dict[str, Any]) -> dict[int, int]:
    """NVML index -> CUDA device, matched by UUID (CUDA orders by speed, NVML by bus)."""
    by_uuid = {gpu["uuid"]: gpu["nvml_index"] for gpu in machine["gpus"]}
    found = {}
    for device in range(cuda.device_count()):
        uuid = cuda.uuid(device)
        if uuid in by_uuid:
            found[by_uuid[uuid]] = device
    return found


def run_probe(nvml: Nvml, open_cuda: Callable[[], CudaLayer], options: ProbeOptions,
              say: Callable[[str], None] = lambda line: None, clock: Callable[[], float] = time.monotonic,
              wall_clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """The whole probe. Raises NoCudaError (one line) when torch or CUDA is missing."""
    started = clock()
    machine = machine_of(nvml)
    chosen, refused = choose_gpus(nvml, options, say)
    report: dict[str, Any] = {"machine": machine, "measured_at": wall_clock(), "refused": refused,
                              "limits": {"max_bytes_per_gpu": options.max_bytes_per_gpu,
                                         "time_limit_s": options.time_limit_s},
                              "gpus": [], "together": None, "pairs": [], "allreduce": None, "findings": []}
    if not chosen:
        return report
    cuda = open_cuda()
    devices = cuda_devices(cuda, machine)
    unmatched = [index for index in chosen if index not in devices]
    for index in unmatched:
        refused.append({"gpu": index, "reason": "CUDA does not see it (CUDA_VISIBLE_DEVICES?)"})
        say(f"GPU {index} not probed: CUDA does not see it")
    chosen = [index for index in chosen if index in devices]
    budget = options.time_limit_s
    facts = {gpu["nvml_index"]: gpu for gpu in machine["gpus"]}
    singles: dict[int, float] = {}
    for index in chosen:
        say(f"GPU {index}: host<->device copies")
        result = links.probe_gpu(cuda, devices[index], facts[index], nvml.link_now,
                                 options.max_bytes_per_gpu, budget * LINKS_SHARE / len(chosen))
        result = {"gpu": index, "cuda_device": devices[index], "name": facts[index]["name"], **result}
        report["gpus"].append(result)
        report["findings"] += links.link_findings(result)
        singles[devices[index]] = result["best_h2d_bytes_per_s"] or 0.0
    if len(chosen) >= 2:
        say(f"GPUs {', '.join(map(str, chosen))}: all at once")
        together = links.probe_all_at_once(cuda, [devices[i] for i in chosen], singles,
                                           options.max_bytes_per_gpu, budget * TOGETHER_SHARE)
        together["gpus"] = chosen
        report["together"] = together
        report["findings"] += links.shared_uplink_findings(together)
        pair_list = [(a, b) for position, a in enumerate(chosen) for b in chosen[position + 1:]]
        for a, b in pair_list:
            say(f"GPUs {a} and {b}: peer copies")
            pair = pairs.probe_pair(cuda, devices[a], devices[b], options.max_bytes_per_gpu,
                                    budget * PAIRS_SHARE / len(pair_list))
            pair = _in_nvml_terms(pair, {devices[i]: i for i in chosen})
            report["pairs"].append(pair)
            report["findings"] += pairs.pair_findings(pair, machine["driver_version"])
    cuda.release()
    report["allreduce"] = _allreduce(chosen, devices, options, budget - (clock() - started), say)
    if report["allreduce"] and report["allreduce"].get("runs"):
        report["findings"] += allreduce.allreduce_findings(report["allreduce"])
    report["duration_s"] = clock() - started
    return report


def _in_nvml_terms(pair: dict[str, Any], nvml_of: dict[int, int]) -> dict[str, Any]:
    """Pairs are measured on CUDA devices and reported as the GPU numbers every screen shows."""
    pair["gpus"] = [nvml_of[d] for d in pair["gpus"]]
    pair["p2p_access"] = {f"{nvml_of[int(k.split('->')[0])]}->{nvml_of[int(k.split('->')[1])]}": v
                          for k, v in pair["p2p_access"].items()}
    for direction in pair.get("directions", []):
        direction["from"], direction["to"] = nvml_of[direction["from"]], nvml_of[direction["to"]]
    return pair


def _allreduce(chosen: list[int], devices: dict[int, int], options: ProbeOptions, left_s: float,
               say: Callable[[str], None]) -> dict[str, Any]:
    if not options.allreduce:
        return {"skipped": "not asked for (--no-allreduce)"}
    if len(chosen) < 2:
        say("all-reduce floor: skipped, it needs at least 2 GPUs")
        return {"skipped": "needs at least 2 GPUs"}
    if left_s < 4:
        say("all-reduce floor: skipped, the time limit is spent")
        return {"skipped": "the time limit is spent"}
    floor: dict[str, Any] = {"gpus": chosen, "size_bytes": options.allreduce_bytes, "runs": []}
    for p2p_disabled in (False, True):
        say(f"all-reduce floor over GPUs {', '.join(map(str, chosen))}"
            + (" with NCCL_P2P_DISABLE=1" if p2p_disabled else ""))
        nbytes = min(options.allreduce_bytes, options.max_bytes_per_gpu // 2)  # NCCL's buffers need the rest
        floor["runs"].append(allreduce.measure([devices[i] for i in chosen], nbytes, p2p_disabled, left_s / 2))
    return floor


def exit_code(report: dict[str, Any]) -> int:
    """As gpumix doctor: 0 healthy, 1 warnings (or GPUs refused), 2 errors."""
    severities = {finding["severity"] for finding in report["findings"]}
    if "error" in severities:
        return 2
    return 1 if "warning" in severities or report["refused"] else 0
