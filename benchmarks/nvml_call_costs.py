"""What each NVML getter costs the calling process when asked once a second, as the hub asks it, against
the same call asked back to back (issue 13: a real GPU's reading is the hub's largest cost, and a getter
that costs 2 µs in a loop cost 124 µs in a tick). Also: does one nvmlDeviceGetFieldValues call asking
several fields cost what its fields cost asked apart (could the tick's getters be folded into one call)?
Raw pynvml only, read-only: NVML getters, nothing set.

    python benchmarks/nvml_call_costs.py --rounds 20 --label idle --out nvml_call_costs_idle.json

Each round (one a second) asks every call once, in a shuffled order, 10 ms apart; per call the median and
mean of process CPU (time.process_time) and of wall time over the rounds. Then each call 50 times back to back.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PCIE_TX, PCIE_RX = 197, 198  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES / RX_BYTES
POWER_INSTANT, POWER_CURRENT_LIMIT, PCIE_REPLAY = 186, 190, 94  # NVML_FI_DEV_POWER_INSTANT, _CURRENT_LIMIT, PCIE_REPLAY_COUNTER


def _calls(nvml: Any, handle: Any) -> dict[str, Callable[[], Any]]:
    fields = nvml.nvmlDeviceGetFieldValues
    return {
        "util": lambda: nvml.nvmlDeviceGetUtilizationRates(handle),
        "memory": lambda: nvml.nvmlDeviceGetMemoryInfo(handle),
        "power_usage": lambda: nvml.nvmlDeviceGetPowerUsage(handle),
        "enforced_limit": lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle),
        "management_limit": lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle),
        "replay_counter": lambda: nvml.nvmlDeviceGetPcieReplayCounter(handle),
        "temperature": lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
        "clock_sm": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
        "clock_mem": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
        "event_reasons": lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
        "link_gen": lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle),
        "link_width": lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle),
        "processes": lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle),
        "fields_pcie_tx_rx": lambda: fields(handle, [PCIE_TX, PCIE_RX]),
        "fields_pcie_tx": lambda: fields(handle, [PCIE_TX]),
        "fields_power_instant": lambda: fields(handle, [POWER_INSTANT]),
        "fields_replay": lambda: fields(handle, [PCIE_REPLAY]),
        "fields_current_limit": lambda: fields(handle, [POWER_CURRENT_LIMIT]),
        "fields_power_limit_replay": lambda: fields(handle, [POWER_INSTANT, POWER_CURRENT_LIMIT, PCIE_REPLAY]),
        "fields_all_five": lambda: fields(handle, [PCIE_TX, PCIE_RX, POWER_INSTANT, POWER_CURRENT_LIMIT, PCIE_REPLAY]),
    }


def _timed(call: Callable[[], Any]) -> tuple[float, float, str | None]:
    """(process CPU µs, wall µs, error name or None)."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    error = None
    try:
        value = call()
        if isinstance(value, list) and value and hasattr(value[0], "nvmlReturn") and value[0].nvmlReturn != 0:
            error = f"field nvmlReturn {value[0].nvmlReturn}"
    except Exception as exc:  # an unsupported getter on this GPU: recorded, not fatal
        error = type(exc).__name__
    return (time.process_time() - cpu0) * 1e6, (time.perf_counter() - wall0) * 1e6, error


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "mean": round(statistics.fmean(values), 2),
            "min": round(min(values), 2), "max": round(max(values), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--period-s", type=float, default=1.0)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--label", default="")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--out")
    args = parser.parse_args()
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    calls = _calls(pynvml, handle)
    order = list(calls)
    shuffle = random.Random(args.seed).shuffle
    ticked: dict[str, dict[str, list[float]]] = {name: {"cpu_us": [], "wall_us": []} for name in calls}
    errors: dict[str, str] = {}
    for _ in range(args.rounds):
        started = time.monotonic()
        shuffle(order)
        for name in order:
            time.sleep(0.01)
            cpu_us, wall_us, error = _timed(calls[name])
            ticked[name]["cpu_us"].append(cpu_us)
            ticked[name]["wall_us"].append(wall_us)
            if error:
                errors[name] = error
        time.sleep(max(0.0, args.period_s - (time.monotonic() - started)))
    looped = {}
    for name, call in calls.items():
        runs = [_timed(call) for _ in range(50)]
        looped[name] = {"cpu_us": _summary([r[0] for r in runs]), "wall_us": _summary([r[1] for r in runs])}
    result = {
        "command": "python " + " ".join(sys.argv),
        "label": args.label,
        "gpu_name": pynvml.nvmlDeviceGetName(handle),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "rounds": args.rounds,
        "period_s": args.period_s,
        "once_a_round": {name: {k: _summary(v) for k, v in t.items()} for name, t in ticked.items()},
        "back_to_back_50": looped,
        "errors": errors,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
