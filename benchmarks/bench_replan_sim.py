"""Re-planning the demo job on the simulated 10-GPU rig, measured end to end.

The demo job (10 rank processes with the real agent, paced by the job model)
runs under the real supervisor with the equal split. Its samples/s is read from
the hub's run summary (medians of 1 s readings); then `gpumix plan` plans from
what the ranks reported, the job restarts into the plan, and it is read again.
The ideal bound is the job model's own: a continuous split in which every
rank's compute ends together, plus the all-reduce its backward does not hide.

    python benchmarks/bench_replan_sim.py --out replan_sim.json
Goals (issue 5): planned step time <= 1.05 x the ideal bound, >= 1.8x the equal split.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpumix.cli.hardware import open_hardware
from gpumix.cli.node import start_node
from gpumix.plan.inputs import plan_from_snapshot
from gpumix.plan.planner import plan_to_json
from gpumix.sim import job_model
from gpumix.sim.rig import load_builtin_rig
from gpumix.sim.world import World

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests.waiting
from tests.waiting import wait_until  # noqa: E402


def ideal_step_s(rig_name: str, global_batch: int) -> float:
    rig = load_builtin_rig(rig_name)
    speeds = [job_model.BASE_SAMPLES_PER_S * gpu.model.relative_speed for gpu in rig.gpus]  # stock caps
    compute_s = global_batch / sum(speeds)
    allreduce_s = World(rig).allreduce_s(range(len(rig.gpus)))  # a rough bound: benchmarks/oracle_replan.py is exact
    return compute_s + job_model.exposed_comm_seconds(compute_s, allreduce_s)


def run_summary(hub: Any, seconds: float) -> dict[str, float]:
    rates, steps = [], []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run = (hub.snapshot() or {}).get("run") or {}
        if run.get("samples_per_s"):
            rates.append(run["samples_per_s"])
            steps.append(run["step_time_s"])
        time.sleep(1.0)
    return {"samples_per_s": statistics.median(rates), "step_time_s": statistics.median(steps)}


def wait(predicate, timeout_s: float, what: str) -> None:
    wait_until(predicate, timeout_s, what, poll_s=0.2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=float, default=10.0, help="seconds of readings per phase")
    parser.add_argument("--out")
    args = parser.parse_args()
    node = start_node(open_hardware(demo=True), str(Path(tempfile.mkdtemp()) / "hub.sock"), demo=True)
    hub, supervisor = node.hub, node.demo.supervisor

    def ranks() -> list[dict[str, Any]]:
        return [r for r in (hub.snapshot() or {}).get("ranks", []) if r["job"] == "demo" and r["connected"]]

    def at_step(step: int) -> bool:
        found = ranks()
        return len(found) == 10 and min(r["step"] or 0 for r in found) >= step

    try:
        wait(lambda: at_step(12), 120, "the demo's first steps")
        equal = run_summary(hub, args.window)
        straggler_before = [r["rank"] for r in ranks() if r["straggler"]]
        _, plan = plan_from_snapshot(hub.snapshot(), "demo")
        data = {**plan_to_json(plan), "plan_id": "bench"}
        assert hub.request_restart("demo", data)["ok"]
        wait(lambda: supervisor.restarts >= 1, 120, "the restart")
        wait(lambda: at_step(supervisor.resume_step + 12), 120, "steps after the restart")
        planned = run_summary(hub, args.window)
        straggler_after = [r["rank"] for r in ranks() if r["straggler"]]
    finally:
        node.stop()
    bound_s = ideal_step_s("mixed-10", data["global_batch"])
    result = {
        "global_batch": data["global_batch"], "split": [r["samples"] for r in data["ranks"]],
        "equal": equal, "planned": planned, "ideal_step_time_s": bound_s,
        "predicted": {k: data[k]["step_time_s"] for k in ("current", "proposed", "ideal")},
        "speedup": planned["samples_per_s"] / equal["samples_per_s"],
        "planned_over_ideal": planned["step_time_s"] / bound_s,
        "stragglers_before": straggler_before, "stragglers_after": straggler_after,
    }
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
