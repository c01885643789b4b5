"""The hub's CPU time per round by part, in process, without a profiler (issue 13): hub_tick_parts.py's
round (R ranks' agent writes through the read path, one Hub.tick, one client reply encoded), with each
part's function wrapped in a thread_time_ns meter (a meter costs ~1 us a call, a few dozen calls a round).

Parts, outermost wins where they nest (the merge's parts are also in "merge (all)"):
world step (the simulator's Machine.tick), GPU reading (the NVML backend's sample: the product's
reading code with the simulated NVML under it), host reading, snapshot rows, history, merge (all) and
its rank rows, findings, tiers, efficiency, plan; steps (read, decode, file); client reply encoding.
Best of --repeats per part (a loaded box only adds), per round; per GPU and per rank as hub_tick_parts.

    .venv/bin/python benchmarks/hub_tick_part_times.py --out times.json
    PYTHONPATH=/tmp/tree_before .venv/bin/python benchmarks/hub_tick_part_times.py --out before.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import bench_hub_steps  # noqa: E402 - the agent's write and the rank hellos, shared


def metered(spent: dict[str, int], label: str, function: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time_ns()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0) + time.thread_time_ns() - started
    return wrapper


def measure(ranks: int, rounds: int, repeats: int) -> dict[str, Any]:
    import gpumix.hub.core as core
    import gpumix.hub.merge as merge
    from gpumix.hub.agent_stream import FrameCutter, handle_frames
    from gpumix.wire import protocol

    data, _ = bench_hub_steps.agent_write()
    hub = bench_hub_steps.make_hub()
    spent: dict[str, int] = {}
    saved = [(core, "build_snapshot"), (core, "merge_ranks"), (merge, "findings"), (merge, "tier_table"),
             (merge, "rank_row"), (merge, "add_efficiency")]
    originals = [(module, name, getattr(module, name)) for module, name in saved]
    labels = {"build_snapshot": "snapshot rows", "merge_ranks": "merge (all)", "findings": "merge: findings",
              "tier_table": "merge: tiers", "rank_row": "merge: rank rows", "add_efficiency": "merge: efficiency"}
    for module, name, function in originals:
        setattr(module, name, metered(spent, labels[name], function))
    hub.plans_in_force.view = metered(spent, "merge: plan", hub.plans_in_force.view)  # type: ignore[method-assign]
    for owner, name, label in [(hub.hardware.machine, "tick", "world step (simulator)"),
                               (hub.hardware.backend, "sample", "GPU reading (product code + simulated NVML)"),
                               (hub._host, "sample", "host reading"), (hub._host, "processes", "host reading"),
                               (hub.history, "add", "history")]:
        setattr(owner, name, metered(spent, label, getattr(owner, name)))
    keys = [hub.agent_hello(bench_hub_steps.hello(rank)) for rank in range(ranks)]
    cutters = [FrameCutter() for _ in keys]

    def one_round() -> None:
        started = time.thread_time_ns()
        for key, cutter in zip(keys, cutters, strict=True):
            handle_frames(hub, key, cutter.frames(data))
        middle = time.thread_time_ns()
        hub.tick()
        ticked = time.thread_time_ns()
        protocol.encode({"type": "snapshot", "snapshot": hub.snapshot()})
        ended = time.thread_time_ns()
        spent["steps (read, decode, file)"] = spent.get("steps (read, decode, file)", 0) + middle - started
        spent["tick (all)"] = spent.get("tick (all)", 0) + ticked - middle
        spent["client reply encoding"] = spent.get("client reply encoding", 0) + ended - ticked

    try:
        for _ in range(20):
            one_round()
        best: dict[str, float] = {}
        for _ in range(repeats):
            spent.clear()
            for _ in range(rounds):
                one_round()
            for label, ns in spent.items():
                best[label] = min(best.get(label, float("inf")), ns / rounds / 1e3)
    finally:
        for module, name, function in originals:
            setattr(module, name, function)
    return {"ranks": ranks, "gpus": len(hub.snapshot()["gpus"]),
            "cpu_us_per_round_best_by_part": {label: round(us, 1) for label, us in sorted(best.items(), key=lambda i: -i[1])}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", default="0,10")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import gpumix

    runs = [measure(int(n), args.rounds, args.repeats) for n in args.ranks.split(",")]
    result = {
        "benchmark": "hub_tick_part_times", "gpumix_from": str(Path(gpumix.__file__).parent),
        "machine": bench_hub_steps.machine(), "command": bench_hub_steps.command(),
        "note": "best of the repeats per part: the parts' bests need not come from one repeat, so they need not add up",
        "runs": runs,
    }
    return bench_hub_steps.report(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
