"""Re-planning recovers the throughput a slowed GPU costs: a real 2-GPU run.

One DDP job (examples/restartable_ddp.py) under the supervisor, measured as the
median of 1 s readings of the hub's run summary in each phase:
  1. equal split, both GPUs free                                   -> fast
  2. equal split, a competing bf16 matmul loop slows GPU 1          -> slowed
  3. `gpumix plan` from live measurements, restart into its split   -> replan 1
  4. plan again from what the new split measured (the hub keeps the
     old split's figures), restart if it proposes a change          -> replan 2
  5. restart into fixed splits around the plans, same harness       -> tried
The reachable best is the best split measured (tried or planned), found by trying
rather than predicted. Reported: recovered = (replanned - slowed) / (best - slowed),
where replanned is the better of the re-plans, and also against the unslowed
run, which no split can reach while the competitor holds GPU 1.

    python benchmarks/bench_replan_gpu.py --out replan.json
Reads NVML only; changes no GPU setting.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from competitor import COMPETITOR  # benchmarks/ is on sys.path for a script there

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests.waiting
from gpumix.cli.hardware import open_hardware
from gpumix.hub import Hub
from gpumix.hub.server import HubServer
from gpumix.plan.inputs import plan_from_snapshot
from gpumix.plan.planner import plan_to_json
from gpumix.run.auto_replan import CHECK_S, AutoReplan
from gpumix.run.supervisor import Supervisor
from tests.waiting import wait_until  # noqa: E402

ROOT = Path(__file__).parents[1]
JOB = "bench"
RANK_KEYS = ("rank", "samples", "step_time_s", "compute_s", "samples_per_s", "comm_share", "points")


class Bench:
    def __init__(self, hub: Hub, supervisor: Supervisor, window_s: float) -> None:
        self.hub, self.supervisor, self.window_s = hub, supervisor, window_s

    def ranks(self) -> list[dict[str, Any]]:
        return [r for r in (self.hub.snapshot() or {}).get("ranks", []) if r["job"] == JOB and r["connected"]]

    def wait(self, predicate, timeout_s: float, what: str) -> None:
        wait_until(predicate, timeout_s, what, poll_s=0.2)

    def at_step(self, step: int) -> bool:
        ranks = self.ranks()
        return len(ranks) == 2 and min(r["step"] or 0 for r in ranks) >= step

    def measure(self) -> dict[str, Any]:
        readings = []
        deadline = time.monotonic() + self.window_s
        while time.monotonic() < deadline:
            run = (self.hub.snapshot() or {}).get("run") or {}
            if run.get("samples_per_s"):
                readings.append(run["samples_per_s"])
            time.sleep(1.0)
        return {"samples_per_s": statistics.median(readings),
                "ranks": [{k: r.get(k) for k in RANK_KEYS} for r in self.ranks()]}

    def restart_into(self, plan: dict[str, Any]) -> dict[str, Any]:
        restarts = self.supervisor.restarts
        reply = self.hub.request_restart(JOB, plan)
        assert reply["ok"], reply
        self.wait(lambda: self.supervisor.restarts > restarts, 300, "the restart")
        self.wait(lambda: self.at_step(self.supervisor.resume_step + 20), 240, "steps after the restart")
        return self.measure()


def fixed_split(first: int, global_batch: int) -> dict[str, Any]:
    counts = [first, global_batch - first]
    return {"plan_id": f"try-{first}", "global_batch": global_batch,
            "ranks": [{"rank": r, "samples": n, "micro_batch": n, "accumulation_steps": 1,
                       "loss_weight": n * 2 / global_batch} for r, n in enumerate(counts)]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--samples-per-rank", type=int, default=512)
    parser.add_argument("--granularity", type=int, default=64, help="plans give multiples of this (GPU tiles)")
    parser.add_argument("--try", dest="tries", default="640,704,768,832",
                        help="rank 0's samples in the fixed splits tried after the re-plans")
    parser.add_argument("--window", type=float, default=8.0, help="seconds of readings per phase")
    parser.add_argument("--auto", action="store_true",
                        help="no re-plan requests: `--auto-replan` (min speedup 1.02) takes over after the slowed phase")
    parser.add_argument("--smoke", action="store_true", help="check the flow on CPU: simulated NVML, no competitor")
    parser.add_argument("--out")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="gpumix-replan-"))
    socket_path = str(folder / "hub.sock")
    hub = Hub(open_hardware(demo=args.smoke), interval_s=0.5)
    server = HubServer(hub, socket_path)
    server.start()
    hub.start()
    competitor = None
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(ROOT / "examples" / "restartable_ddp.py"), "--steps", "1000000", "--dataset", "16000000",
               "--hidden", str(args.hidden), "--layers", str(args.layers), "--dtype", "float32",
               "--samples-per-rank", str(args.samples_per_rank), "--checkpoint", str(folder / "ckpt.pt")]
    if args.smoke:  # a CPU job this small runs thousands of steps a second: pace it like a real one
        command += ["--step-sleep", "0.02"]
    supervisor = Supervisor(command, JOB, hub=socket_path, control_dir=folder / "control",
                            granularity=args.granularity)
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    bench = Bench(hub, supervisor, args.window)
    global_batch = 2 * args.samples_per_rank
    result: dict[str, Any] = {"hidden": args.hidden, "layers": args.layers, "global_batch": global_batch,
                              "granularity": args.granularity, "phases": {}}
    phases = result["phases"]

    def replan(name: str) -> bool:
        _, plan = plan_from_snapshot(hub.snapshot(), JOB)
        data = {**plan_to_json(plan), "plan_id": name}
        _, plain = plan_from_snapshot(hub.snapshot(), JOB, granularity=1)
        phase: dict[str, Any] = {"plan": data, "without_granularity": [r["samples"] for r in plan_to_json(plain)["ranks"]]}
        phases[name] = phase
        print(name, "proposes", [r["samples"] for r in data["ranks"]], f"speedup {data['speedup']:.3f}",
              "(granularity 1:", phase["without_granularity"], ")", flush=True)
        if data["kept_current"] or (data["speedup"] or 0) < 1.02:
            return False
        phase.update(bench.restart_into(data))
        print(name, f"{phase['samples_per_s']:.0f} samples/s", flush=True)
        return True

    try:
        bench.wait(lambda: bench.at_step(20), 240, "the job's first steps")
        phases["fast"] = bench.measure()
        if not args.smoke:
            competitor = subprocess.Popen([sys.executable, "-c", COMPETITOR.format(gpu=1, seconds=900)])
        time.sleep(8)  # the competitor's start-up, then the ranks' medians follow the slowdown
        phases["slowed"] = bench.measure()
        print("fast", round(phases["fast"]["samples_per_s"]), "slowed", round(phases["slowed"]["samples_per_s"]), flush=True)
        if args.auto:  # as `gpumix run --auto-replan`, switched on once the slowdown is measured
            auto = supervisor.auto_replan = AutoReplan(min_speedup=1.02, max_restarts=3)
            # Settled: the ranks past the warm-up the auto re-plan waits for, then two of its checks
            # without a new plan (a relaunch's start-up varies: count steps, not seconds).
            quiet_since, seen = time.monotonic(), 0
            while time.monotonic() - quiet_since < 2 * CHECK_S + 1:
                time.sleep(0.5)
                warm = bench.at_step(supervisor.resume_step + auto.settle_steps)
                if (auto.proposed != seen or supervisor.state != "running" or supervisor.restarts != auto.proposed
                        or not warm):
                    seen, quiet_since = auto.proposed, time.monotonic()
            bench.wait(lambda: bench.at_step(supervisor.resume_step + 20), 240, "steps after the last restart")
            phases["replan-auto"] = {**bench.measure(), "restarts": supervisor.restarts,
                                     "plan": supervisor.plan.to_json() if supervisor.plan else None}
            print("auto", supervisor.restarts, "restarts", round(phases["replan-auto"]["samples_per_s"]), flush=True)
            supervisor.auto_replan = None  # the fixed splits below are tried as asked
        elif replan("replan1"):
            replan("replan2")
        for first in (int(x) for x in args.tries.split(",")):
            phases[f"try-{first}"] = bench.restart_into(fixed_split(first, global_batch))
            print(f"try-{first}", round(phases[f"try-{first}"]["samples_per_s"]), flush=True)
    finally:
        supervisor.stop()
        thread.join(timeout=60)
        if competitor is not None:
            competitor.kill()
        server.stop()
        hub.stop()
    rate = {name: phase["samples_per_s"] for name, phase in phases.items() if "samples_per_s" in phase}
    fast, slowed = rate["fast"], rate["slowed"]
    # a plan that keeps the current split leaves the job as it was
    replanned = max([v for k, v in rate.items() if k.startswith("replan")], default=slowed)
    best_name = max((k for k in rate if k.startswith(("replan", "try", "slowed"))), key=rate.__getitem__)
    result["summary"] = {
        "fast_samples_per_s": fast, "slowed_samples_per_s": slowed, "replanned_samples_per_s": replanned,
        "best_measured_samples_per_s": rate[best_name], "best_measured": best_name,
        "recovered_of_reachable": (replanned - slowed) / (rate[best_name] - slowed) if rate[best_name] > slowed else None,
        "recovered_of_unslowed": (replanned - slowed) / (fast - slowed) if fast > slowed else None,
        "speedup": replanned / slowed,
    }
    text = json.dumps(result, indent=1)
    print(json.dumps(result["summary"], indent=1))
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    main()
