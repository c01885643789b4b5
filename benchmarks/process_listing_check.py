"""Does the backend list a CUDA process the tick NVML does, now that it reads the process list every few
seconds and when the GPU's memory moves (gpumix/hw/nvml_settled.py, issue 13)? Against raw NVML.

Each tick (1 s) this reads GPU 0 twice: `NvmlBackend.sample()` (gpumix's reading) and, right after, raw
pynvml's nvmlDeviceGetComputeRunningProcesses (the reference, none of gpumix's code). Meanwhile it starts
CUDA processes (torch: a context and ALLOC_MIB of memory) that live a few seconds, one after another, and
one that allocates more memory halfway. Per tick: the pids (and their memory) each reading lists; summary: the
ticks where the two differ (a process that came or went between the two reads can make one such tick on its own).
Read-only on the GPU: NVML getters, and ordinary CUDA allocations.

    python benchmarks/process_listing_check.py --out process_listing.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import sys, time, torch
x = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
time.sleep(float(sys.argv[2]))
if len(sys.argv) > 3:
    y = torch.empty(int(sys.argv[3]) << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    time.sleep(float(sys.argv[2]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alloc-mib", type=int, default=256)
    parser.add_argument("--out")
    args = parser.parse_args()
    import pynvml

    from gpumix.hw.nvml_backend import NvmlBackend

    backend = NvmlBackend()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gpu_name = pynvml.nvmlDeviceGetName(handle)  # before close(): it shuts NVML down
    # (start at tick, argv): a process alone, a second while the first runs, one that allocates again halfway
    plan = {2: [str(args.alloc_mib), "6"], 5: [str(args.alloc_mib), "4"], 14: [str(args.alloc_mib), "4", "512"]}
    children: list[subprocess.Popen[bytes]] = []
    ticks = []
    next_at = time.monotonic()
    for tick in range(30):
        if tick in plan:
            children.append(subprocess.Popen([sys.executable, "-c", CHILD, *plan[tick]]))
        next_at += 1.0
        time.sleep(max(0.0, next_at - time.monotonic()))
        sample = backend.sample()[0]
        listed = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        ticks.append({"tick": tick, "gpumix_pids": sorted(p.pid for p in sample.processes),
                      "nvml_pids": sorted(int(p.pid) for p in listed),
                      "gpumix_mem": sorted((p.pid, p.gpu_mem_bytes) for p in sample.processes),
                      "nvml_mem": sorted((int(p.pid), p.usedGpuMemory) for p in listed),
                      "mem_used_mib": (sample.mem_used_bytes or 0) >> 20, "util_gpu_pct": sample.util_gpu_pct})
    for child in children:
        child.wait(timeout=30)
    backend.close()
    differ = [t["tick"] for t in ticks if t["gpumix_pids"] != t["nvml_pids"]]
    differ_mem = [t["tick"] for t in ticks if t["gpumix_mem"] != t["nvml_mem"]]
    seen_by_nvml = {pid for t in ticks for pid in t["nvml_pids"]}
    # per pid: the first tick NVML lists it and the first tick gpumix does (the lag of the listing, in ticks)
    lags = {}
    for pid in sorted(seen_by_nvml):
        first_nvml = next(t["tick"] for t in ticks if pid in t["nvml_pids"])
        first_ours = next((t["tick"] for t in ticks if pid in t["gpumix_pids"]), None)
        gone_nvml = next((t["tick"] for t in ticks if t["tick"] > first_nvml and pid not in t["nvml_pids"]), None)
        gone_ours = next((t["tick"] for t in ticks if first_ours is not None and t["tick"] > first_ours
                          and pid not in t["gpumix_pids"]), None)
        lags[str(pid)] = {"listed_lag_ticks": None if first_ours is None else first_ours - first_nvml,
                          "dropped_lag_ticks": None if gone_nvml is None or gone_ours is None else gone_ours - gone_nvml}
    result = {"command": "python " + " ".join(sys.argv), "gpu": gpu_name,
              "ticks_compared": len(ticks), "ticks_that_differ": differ,
              "ticks_whose_process_memory_differs": differ_mem, "processes_seen_by_nvml": len(seen_by_nvml),
              "lag_by_pid": lags, "ticks": ticks}
    text = json.dumps(result, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "ticks"}, indent=1))
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
