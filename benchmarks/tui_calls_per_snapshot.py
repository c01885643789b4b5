"""Python calls the dashboard makes per snapshot, for the same snapshots every run (issue 13: a
deterministic figure beside the noisy CPU of a loaded box).

A simulated rig on a manual clock, sampled once a simulated second, its host's readings cycling
through fixed values; the dashboard under Textual's Pilot (headless: the terminal write itself is
not counted) renders each snapshot and its screen refresh; cProfile counts the calls of the UI
thread over those snapshots only (not the hub's tick; Pilot's wait for the refresh, the same each run), by owner (the TUI, the rest of gpumix, Textual, Rich, builtins).
Run it with PYTHONPATH set to a tree laid out by benchmarks/tree_at.sh to count another commit:

    PYTHONPATH=/tmp/before .venv/bin/python benchmarks/tui_calls_per_snapshot.py --rig benchmarks/rig_1gpu.toml \\
        --size 160x48 --snapshots 40 --out calls_before.json
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_threads import is_wait, owner  # noqa: E402

from gpumix.cli.hardware import simulated_hardware  # noqa: E402
from gpumix.hub import Hub  # noqa: E402
from gpumix.hub.history import HISTORY_FIELDS  # noqa: E402
from gpumix.hw.host import HostSample, HostSampler  # noqa: E402
from gpumix.sim.machine import GIB, GpuActivity  # noqa: E402
from gpumix.sim.rig import load_builtin_rig, load_rig  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000.0

    def __call__(self) -> float:
        return self.now_s


class CyclingHost(HostSampler):
    """The host line's numbers move every snapshot, the same way every run."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def sample(self) -> HostSample:
        self.count += 1
        step = self.count % 7
        return HostSample(cpu_pct=30.0 + step, cpu_per_core_pct=[10.0 + step, 20.0, 30.0, 40.0 - step, 50.0, 60.0, 70.0, 20.0],
                          mem_used_bytes=(48 + step) * 1024**3, mem_total_bytes=128 * 1024**3, swap_used_bytes=0,
                          swap_total_bytes=8 * 1024**3, load_avg=[6.5, 6.1, 5.9])


def busy_activity(number: int, gpu: int) -> GpuActivity:
    """A GPU whose util, power, memory and PCIe rates move every snapshot (the H200 'busy' case: H2D
    copies and matmuls), the same way every run."""
    step = (number + 3 * gpu) % 11
    util_pct = 60.0 + 3.0 * step
    rate_bytes_per_s = (2.0 + 0.7 * step) * 1e9
    return GpuActivity(busy_fraction=util_pct / 100, util_pct=util_pct, mem_used_bytes=int((10.0 + 0.37 * step) * GIB),
                       pcie_rx_bytes_per_s=rate_bytes_per_s, pcie_tx_bytes_per_s=rate_bytes_per_s / 3, pids=[4242])


async def count(rig: str, cols: int, rows: int, snapshots: int, warm: int, prof: Path | None = None,
                busy: bool = False) -> dict[str, Any]:
    from gpumix.tui.app import GpumixApp

    clock = Clock()
    spec = load_rig(rig) if rig.endswith(".toml") else load_builtin_rig(rig)
    hardware = simulated_hardware(spec, clock=clock, wall_clock=lambda: 1_764_500_000.0 + clock())
    hub = Hub(hardware, interval_s=1.0, host_sampler=CyclingHost(), clock=clock,
              wall_clock=lambda: 1_764_500_000.0 + clock(), hostname="rig01")
    machine = hardware.machine
    if busy:
        machine.synthetic_job = False  # the activity is set below, a new one each snapshot
    hub.tick()
    app = GpumixApp(hub, interval_s=3600)  # its own polls out of the way: the snapshots come from here
    profile = cProfile.Profile()
    async with app.run_test(size=(cols, rows)) as pilot:
        while app.renders < 1:
            await pilot.pause()
        for number in range(warm + snapshots):
            clock.now_s += 1.0
            if busy:
                for gpu in range(len(machine.gpus)):
                    machine.set_activity(gpu, busy_activity(number, gpu))
            snapshot = hub.tick()  # the hub's work is not counted
            series = {(0, name): hub.series(0, name) for name in HISTORY_FIELDS}
            if number >= warm:
                profile.enable()
            app._received(snapshot, series)
            await pilot.pause()  # the refresh; Pilot's own wait is counted too, the same in every run
            profile.disable()
    stats = pstats.Stats(profile)
    if prof is not None:
        stats.dump_stats(str(prof))
    owners: dict[str, int] = {}
    for (filename, _, function), (_, ncalls, _, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if not is_wait(function):
            owners[owner(filename, function)] = owners.get(owner(filename, function), 0) + ncalls
    total = sum(owners.values())
    return {"rig": rig, "terminal": f"{cols}x{rows}", "busy": busy, "snapshots": snapshots, "warm_snapshots": warm,
            "calls_per_snapshot": round(total / snapshots, 1),
            "by_owner_per_snapshot": {k: round(v / snapshots, 1) for k, v in sorted(owners.items(), key=lambda kv: -kv[1])}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rig", default="benchmarks/rig_1gpu.toml", help="a rig file or a shipped rig's name")
    parser.add_argument("--size", default="160x48")
    parser.add_argument("--snapshots", type=int, default=40)
    parser.add_argument("--warm", type=int, default=6, help="snapshots rendered before counting")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--busy", action="store_true",
                        help="every GPU's util, power, memory and PCIe rates move every snapshot")
    parser.add_argument("--prof", type=Path, help="the pstats of the counted snapshots")
    args = parser.parse_args()
    cols, rows = (int(part) for part in args.size.split("x"))
    result = asyncio.run(count(args.rig, cols, rows, args.snapshots, args.warm, args.prof, args.busy))
    import gpumix

    result["gpumix"] = str(Path(gpumix.__file__).parent)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
