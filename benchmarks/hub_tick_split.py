"""Where the no-rank hub's tick goes on a simulated rig (issue 13): the simulator's own cost (the world,
not ours: gpumix/sim/ and the random module it draws noise from) against the hub's (its NVML reading
code, the snapshot, the merge, the advisor), in process.

Three measures: the thread's CPU time of --ticks ticks (Hub.tick with its merge, as `gpumix hub` runs
them), best of --repeats; and a cProfile of the same ticks, its own time summed by where the code lives
(cProfile inflates small calls: the shares, not the microseconds, are the point); and that profile's
function calls per tick by the same owners, which a loaded box does not move.

    .venv/bin/python benchmarks/hub_tick_split.py --rig mixed-10 --out split.json
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import sys
import time
from pathlib import Path

from result_out import report


def owner(path: str) -> str:
    """Which part a function's file belongs to."""
    if "/gpumix/sim/" in path or path.endswith(("random.py",)) or "_random" in path:
        return "simulator (gpumix/sim, random)"
    for part in ("hw", "hub", "advice", "power", "wire"):
        if f"/gpumix/{part}/" in path:
            return f"gpumix/{part}"
    return "other (stdlib, builtins)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rig", default="mixed-10")
    parser.add_argument("--ticks", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from gpumix.cli.hardware import simulated_hardware
    from gpumix.hub import Hub
    from gpumix.sim.rig import load_builtin_rig

    hub = Hub(simulated_hardware(load_builtin_rig(args.rig)))
    for _ in range(5):
        hub.tick()
    per_tick_ms = []
    for _ in range(args.repeats):
        started = time.thread_time()
        for _ in range(args.ticks):
            hub.tick()
        per_tick_ms.append((time.thread_time() - started) / args.ticks * 1e3)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.ticks):
        hub.tick()
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    by_owner: dict[str, float] = {}
    calls_by_owner: dict[str, int] = {}  # function calls, all of them (recursive ones too): deterministic
    for (file, _, _), (_, calls, tottime, *_rest) in stats.items():
        by_owner[owner(file)] = by_owner.get(owner(file), 0.0) + tottime
        calls_by_owner[owner(file)] = calls_by_owner.get(owner(file), 0) + calls
    total = sum(by_owner.values())
    # the simulator inclusive: the time under each call into gpumix/sim from outside it (builtins it calls included)
    world_s = sum(cumtime for (file, _, _), (*_head, callers) in stats.items() if "/gpumix/sim/" in file
                  for (caller_file, _, _), (_, _, _, cumtime) in callers.items() if "/gpumix/sim/" not in caller_file)
    result = {
        "benchmark": "hub_tick_split", "rig": args.rig, "gpus": len(hub.snapshot()["gpus"]),
        "machine": {"hostname": platform.node(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "load_average": [round(x, 2) for x in os.getloadavg()]},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "cpu_ms_per_tick_best": round(min(per_tick_ms), 3), "cpu_ms_per_tick_all": [round(x, 3) for x in per_tick_ms],
        "profiled_share_simulator_inclusive": round(world_s / total, 3),
        "cpu_ms_per_tick_simulator_estimate": round(min(per_tick_ms) * world_s / total, 3),
        "profiled_share_by_owner": {name: round(seconds / total, 3)
                                    for name, seconds in sorted(by_owner.items(), key=lambda item: -item[1])},
        # what a box's load does not move: the calls a tick makes, by where the called code lives
        "profiled_calls_per_tick": round(sum(calls_by_owner.values()) / args.ticks, 1),
        "profiled_calls_per_tick_by_owner": {name: round(calls / args.ticks, 1)
                                             for name, calls in sorted(calls_by_owner.items(), key=lambda item: -item[1])},
    }
    return report(result, args.out, indent=2)


if __name__ == "__main__":
    sys.exit(main())
