"""What a hub's tick costs once a second against back to back, with 1 and with N GPUs (issue 13), over an
NVML stand-in whose calls answer at once: gpumix's own code alone, no driver under it.

A hub sleeps between ticks, and code that ran a second ago runs slower (the CPU's caches went to others):
on the 2-core box a tick took ~850 µs once every half second against ~145 back to back. Most of that is
paid once a tick, whatever the GPU count, which is why one GPU's reading on a one-GPU machine, times ten,
overstates ten GPUs (benchmarks/alias_nvml.py measures the same on a real GPU).

    python benchmarks/cold_tick.py --rounds 3 --out cold_tick.json

Each round, for 1 and N GPUs in turn: a fresh Hub ticks TICKS times PAUSE_S apart (after 3 unmeasured
ticks), then TICKS times back to back; per tick the process CPU (time.process_time_ns) of the whole tick
and of its GPU reading (`backend.sample()`) and host reading apart. Medians per round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml


class InstantNvml:
    """The NVML calls NvmlBackend makes, answered at once with an idle GPU's values (pynvml's constants and
    errors come from pynvml itself)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._util = SimpleNamespace(gpu=0, memory=0)
        self._memory = SimpleNamespace(used=500 << 20, total=80 << 30, free=0)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvml"):  # a call this stand-in does not answer: as a driver without it
            def unsupported(*_: Any) -> Any:
                raise pynvml.NVMLError_NotSupported(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return unsupported
        return getattr(pynvml, name)

    def nvmlInit(self) -> None: ...  # noqa: N802 (NVML's names throughout)
    def nvmlShutdown(self) -> None: ...  # noqa: N802
    def nvmlSystemGetDriverVersion(self) -> str: return "instant"  # noqa: N802
    def nvmlDeviceGetCount(self) -> int: return self.count  # noqa: N802
    def nvmlDeviceGetHandleByIndex(self, index: int) -> int: return index  # noqa: N802
    def nvmlDeviceGetName(self, handle: int) -> str: return "Instant GPU"  # noqa: N802
    def nvmlDeviceGetUUID(self, handle: int) -> str: return f"GPU-instant-{handle}"  # noqa: N802
    def nvmlDeviceGetPciInfo(self, handle: int) -> Any: return SimpleNamespace(busId=f"0000:{handle + 1:02x}:00.0".encode())  # noqa: N802,E501
    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any: return self._memory  # noqa: N802
    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: int) -> tuple[int, int]: return (100_000, 450_000)  # noqa: N802,E501
    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: int) -> int: return 350_000  # noqa: N802
    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: int) -> int: return 4  # noqa: N802
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: int) -> int: return 4  # noqa: N802
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: int) -> int: return 16  # noqa: N802
    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any: return self._util  # noqa: N802
    def nvmlDeviceGetPowerUsage(self, handle: int) -> int: return 30_000  # noqa: N802
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int: return 350_000  # noqa: N802
    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int: return 350_000  # noqa: N802
    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int: return 210  # noqa: N802
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int: return 1  # noqa: N802
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: int) -> int: return 1  # noqa: N802
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: int) -> int: return 16  # noqa: N802
    def nvmlDeviceGetPcieReplayCounter(self, handle: int) -> int: return 0  # noqa: N802
    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int: return 30  # noqa: N802
    def nvmlDeviceGetFanSpeed(self, handle: int) -> int: return 0  # noqa: N802
    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]: return []  # noqa: N802

    def nvmlDeviceGetFieldValues(self, handle: int, field_ids: list[int]) -> list[Any]:  # noqa: N802
        stamp_us = int(time.time() * 1e6)
        return [SimpleNamespace(fieldId=f, nvmlReturn=0, valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                                value=SimpleNamespace(uiVal=1000, ullVal=1000), timestamp=stamp_us, scopeId=0,
                                latencyUsec=0) for f in field_ids]


def measure(gpus: int, ticks: int, pause_s: float) -> dict[str, float]:
    from gpumix.hub.core import Hub
    from gpumix.hw.hardware import Hardware
    from gpumix.hw.nvml_backend import NvmlBackend

    hub = Hub(Hardware(backend=NvmlBackend(nvml=InstantNvml(gpus)), source="nvml"))
    parts: dict[str, list[float]] = {"gpu_reading": [], "host_reading": []}

    def metered(label: str, function: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            started = time.process_time_ns()
            try:
                return function(*args)
            finally:
                parts[label].append((time.process_time_ns() - started) / 1e3)
        return wrapper

    hub.hardware.backend.sample = metered("gpu_reading", hub.hardware.backend.sample)
    hub._host.sample = metered("host_reading", hub._host.sample)
    result: dict[str, float] = {}
    for mode, pause in (("paused", pause_s), ("back_to_back", 0.0)):
        tick_us = []
        for tick in range(3 + ticks):
            if pause:
                time.sleep(pause)
            started = time.process_time_ns()
            hub.tick()
            if tick >= 3:
                tick_us.append((time.process_time_ns() - started) / 1e3)
        result[f"{mode}_tick_us"] = statistics.median(tick_us)
        for label, values in parts.items():
            result[f"{mode}_{label}_us"] = statistics.median(values[-ticks:])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--pause-s", type=float, default=0.5, help="between ticks in the paused mode (default 0.5)")
    parser.add_argument("--out")
    args = parser.parse_args()
    import gpumix

    rounds = [{str(n): measure(n, args.ticks, args.pause_s) for n in (1, args.gpus)} for _ in range(args.rounds)]
    summary = {str(n): {key: statistics.median(r[str(n)][key] for r in rounds) for key in rounds[0][str(n)]}
               for n in (1, args.gpus)}
    one, many = summary["1"], summary[str(args.gpus)]
    summary["per_added_gpu_paused_us"] = (many["paused_gpu_reading_us"] - one["paused_gpu_reading_us"]) / (args.gpus - 1)
    summary["per_added_gpu_back_to_back_us"] = (many["back_to_back_gpu_reading_us"]
                                                - one["back_to_back_gpu_reading_us"]) / (args.gpus - 1)
    result = {"benchmark": "cold_tick", "command": " ".join(["python", *sys.argv]), "gpumix_from": gpumix.__path__[0],
              "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                          "load_average": list(os.getloadavg())},
              "summary_median_of_rounds": summary, "rounds": rounds}
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
