"""How many PCIe calls (counter reads, 20 ms windows) a hub makes over the same ticks with no dashboard
viewing it and with one (issue 13, session 21): the simulated 10-GPU demo rig, its synthetic job keeping
the GPUs busy, a manual clock at 1 s ticks, the links held at their max generation (as an H100's and an
H200's stay), every GPU's PCIe calls counted on the NVML look-alike. Calls, not CPU: what a call costs is
the real driver's (an H100's busy pair: about 1.0 ms, benchmarks/results/hub_gpu_reading_alias_summary_h100_s19_2026-12-07.json).

    python benchmarks/pcie_calls_unviewed.py --ticks 60 --out benchmarks/results/pcie_calls_unviewed_s21.json
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from result_out import report

from gpumix.cli.hardware import simulated_hardware
from gpumix.hub.core import Hub
from gpumix.hw.host import HostSampler
from gpumix.sim.rig import load_builtin_rig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for tests.call_counts
from tests.call_counts import count_calls  # noqa: E402

PCIE_CALLS = ("nvmlDeviceGetFieldValues", "nvmlDeviceGetPcieThroughput")


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def counted_hub(clock: Clock) -> tuple[Hub, Counter[str]]:
    """A hub on the demo rig whose NVML look-alike counts its PCIe calls and keeps links at their max."""
    hardware = simulated_hardware(load_builtin_rig("mixed-10"), clock=clock, wall_clock=lambda: 1.7e9 + clock())
    def wait(seconds: float) -> None:  # the pair's 20 ms move the world's clock, as the real wait moves NVML's
        clock.now_s += seconds
    hardware.backend._sleep = wait
    nvml = hardware.backend._nvml
    nvml.nvmlDeviceGetCurrPcieLinkGeneration = lambda handle: nvml.machine.gpus[handle.index].spec.link_gen_max
    calls = count_calls(nvml, PCIE_CALLS)
    return Hub(hardware, host_sampler=HostSampler(), clock=clock, wall_clock=lambda: 1.7e9 + clock()), calls


def run(ticks: int, viewed: bool) -> dict[str, Any]:
    clock = Clock()
    hub, calls = counted_hub(clock)
    for _ in range(5):  # the first readings
        hub.tick()
        clock.now_s += 1.0
    calls.clear()
    busy = 0
    for _ in range(ticks):
        if viewed:
            hub.note_viewer()  # a dashboard asks each refresh
        snapshot = hub.tick()
        busy += sum(1 for gpu in snapshot["gpus"] if (gpu.get("util_gpu_pct") or 0) > 0)
        clock.now_s += 1.0
    hub.hardware.backend.close()
    return {"viewed": viewed, "ticks": ticks, "gpus": len(snapshot["gpus"]), "busy_gpu_ticks": busy,
            "calls": dict(calls), "calls_per_tick": round(sum(calls.values()) / ticks, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ticks", type=int, default=60)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    runs = [run(args.ticks, viewed=False), run(args.ticks, viewed=True)]
    result = {"benchmark": "pcie_calls_unviewed", "command": " ".join(["python", *sys.argv]), "runs": runs,
              "unviewed_over_viewed": round(runs[0]["calls_per_tick"] / runs[1]["calls_per_tick"], 3)}
    return report(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
