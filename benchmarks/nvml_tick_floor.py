"""The floor under a GPU's reading in the hub (issue 13): what the same NVML getters cost in raw pynvml,
asked together once a second as a tick asks them, against gpumix's own reading (`NvmlBackend.sample()`)
in the same process, half a second later, every second. The gap is what gpumix adds: its Python (run cold,
once a second, as in the hub) and the calls it makes that the raw set does not (the settled, slow and
PCIe readings on their schedules).

    python benchmarks/nvml_tick_floor.py --rounds 40 --label idle --out nvml_tick_floor_idle.json

Each second one raw variant runs, in turn (process CPU of the whole set, time.process_time_ns around it,
no timer inside it):
  - hub_order: the tick's eight getters in the hub's order (utilization, memory, power, enforced limit,
    SM clock, memory clock, clock event reasons, link generation; gpumix/hw/nvml_backend.py _TICK_CALLS);
  - power_first: the same with power first (is the first call's cost the call's, or the tick's?);
  - memory_v2: hub_order with nvmlDeviceGetMemoryInfo's version 2 (a cheaper call?);
  - per_call: hub_order with each call timed apart (where the set's time goes).
Then gpumix's reading, 0.5 s later: of every GPU of the machine, per GPU (on a one-GPU machine, the same
GPU). Read-only: NVML getters only, nothing set.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

VARIANTS = ("hub_order", "power_first", "memory_v2", "per_call")


def tick_set(nvml: Any, handle: Any, memory_v2: bool = False) -> list[tuple[str, Callable[[], Any]]]:
    """The hub's every-tick getters for one GPU, in its order."""
    memory: Callable[[], Any] = (lambda: nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)) \
        if memory_v2 else (lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    return [
        ("util", lambda: nvml.nvmlDeviceGetUtilizationRates(handle)),
        ("memory_v2" if memory_v2 else "memory", memory),
        ("power", lambda: nvml.nvmlDeviceGetPowerUsage(handle)),
        ("enforced_limit", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle)),
        ("clock_sm", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        ("clock_mem", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
        ("event_reasons", lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),
        ("link_gen", lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
    ]


def run_set(calls: list[tuple[str, Callable[[], Any]]]) -> float:
    """The whole set's process CPU, µs."""
    started = time.process_time_ns()
    for _, call in calls:
        call()
    return (time.process_time_ns() - started) / 1e3


def run_per_call(calls: list[tuple[str, Callable[[], Any]]], into: dict[str, list[float]]) -> float:
    total = 0.0
    for name, call in calls:
        started = time.process_time_ns()
        call()
        spent = (time.process_time_ns() - started) / 1e3
        into.setdefault(name, []).append(spent)
        total += spent
    return total


def _stats(values: list[float]) -> dict[str, float | int]:
    return {"n": len(values), "median_us": round(statistics.median(values), 2),
            "mean_us": round(statistics.fmean(values), 2), "min_us": round(min(values), 2),
            "max_us": round(max(values), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40, help="seconds measured (default 40), after --warmup")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--label", default="")
    parser.add_argument("--out")
    args = parser.parse_args()
    import pynvml

    from gpumix.hw.nvml_backend import NvmlBackend
    from gpumix.hw.nvml_topology import _text

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    backend = NvmlBackend()  # gpumix's reading, its own NVML session in this process (init is counted)
    sets = {"hub_order": tick_set(pynvml, handle), "memory_v2": tick_set(pynvml, handle, memory_v2=True)}
    sets["power_first"] = [sets["hub_order"][2], *sets["hub_order"][:2], *sets["hub_order"][3:]]
    raw: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    per_call: dict[str, list[float]] = {}
    gpumix_us: list[float] = []
    errors: list[str] = []
    next_s = time.monotonic() + 1.0
    for second in range(args.warmup + args.rounds):
        variant = VARIANTS[second % len(VARIANTS)]
        time.sleep(max(0.0, next_s - time.monotonic()))
        try:
            spent = run_per_call(sets["hub_order"], per_call if second >= args.warmup else {}) \
                if variant == "per_call" else run_set(sets[variant])
        except pynvml.NVMLError as error:  # e.g. no version-2 memory call on an old driver: said, not fatal
            errors.append(f"{variant}: {error}")
            spent = None
        time.sleep(max(0.0, next_s + 0.5 - time.monotonic()))
        started = time.process_time_ns()
        backend.sample()
        reading_us = (time.process_time_ns() - started) / 1e3
        if second >= args.warmup:
            if spent is not None:
                raw[variant].append(spent)
            gpumix_us.append(reading_us / max(1, len(backend.gpus())))
        next_s += 1.0
    result: dict[str, Any] = {
        "benchmark": "nvml_tick_floor", "label": args.label, "command": " ".join(["python", *sys.argv]),
        "gpu_name": _text(pynvml.nvmlDeviceGetName(handle)),
        "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
        "gpus_read_by_gpumix": len(backend.gpus()), "rounds": args.rounds,
        "raw_set_cpu": {variant: _stats(values) for variant, values in raw.items() if values},
        "raw_per_call_cpu": {call: _stats(values) for call, values in per_call.items()},
        "gpumix_reading_cpu_per_gpu": _stats(gpumix_us),
        "errors": errors[:20],
    }
    floor = result["raw_set_cpu"].get("hub_order")
    if floor:
        result["gpumix_over_floor_median_us"] = round(result["gpumix_reading_cpu_per_gpu"]["median_us"]
                                                      - floor["median_us"], 2)
    backend.close()
    pynvml.nvmlShutdown()
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
