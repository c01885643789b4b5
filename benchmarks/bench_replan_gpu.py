"""Re-planning recovers the throughput a slowed GPU costs: a real 2-GPU run.

One DDP job (examples/restartable_ddp.py) under the supervisor, three phases,
each measured as the median of 1 s readings of the hub's run summary:
  1. equal split, both GPUs free                          -> fast
  2. equal split, a competing matmul loop slows GPU 1      -> slowed
  3. gpumix plans from live measurements and restarts the job into its split -> replanned
Reported: recovered_of_lost = (replanned - slowed) / (fast - slowed), and
recovered_of_reachable = (replanned - slowed) / (reachable - slowed), where
reachable is the planner's ideal bound calibrated by the ratio of measured to
predicted throughput of the slowed equal split. With one GPU really slowed no
split can get back to `fast`: only the waiting part of the loss is reachable.

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

from gpumix.hub import Hub
from gpumix.hub.server import HubServer
from gpumix.hw.open import open_hardware
from gpumix.plan_inputs import plan_from_snapshot
from gpumix.planner import plan_to_json
from gpumix.supervisor import Supervisor

ROOT = Path(__file__).parents[1]
COMPETITOR = """
import torch, time
a = torch.randn(8192, 8192, device="cuda:{gpu}", dtype=torch.bfloat16)
end = time.time() + {seconds}
while time.time() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
"""


def samples_per_s(hub: Hub, seconds: float) -> float:
    readings = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run = (hub.snapshot() or {}).get("run") or {}
        if run.get("samples_per_s"):
            readings.append(run["samples_per_s"])
        time.sleep(1.0)
    return statistics.median(readings)


def wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--samples-per-rank", type=int, default=512)
    parser.add_argument("--window", type=float, default=12.0, help="seconds of readings per phase")
    parser.add_argument("--out")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="gpumix-replan-"))
    socket_path = str(folder / "hub.sock")
    hub = Hub(open_hardware(), interval_s=0.5)
    server = HubServer(hub, socket_path)
    server.start()
    hub.start()
    competitor = None
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(ROOT / "examples" / "restartable_ddp.py"), "--steps", "1000000", "--dataset", "4000000",
               "--hidden", str(args.hidden), "--layers", str(args.layers), "--dtype", "float32",
               "--samples-per-rank", str(args.samples_per_rank), "--checkpoint", str(folder / "ckpt.pt")]
    supervisor = Supervisor(command, "bench", hub=socket_path, control_dir=folder / "control")
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    result: dict = {"hidden": args.hidden, "layers": args.layers, "samples_per_rank": args.samples_per_rank}
    try:
        def ranks_at(step: int) -> bool:
            ranks = [r for r in (hub.snapshot() or {}).get("ranks", []) if r["job"] == "bench" and r["connected"]]
            return len(ranks) == 2 and min(r["step"] or 0 for r in ranks) >= step

        wait(lambda: ranks_at(20), 240, "the job's first steps")
        result["fast_samples_per_s"] = samples_per_s(hub, args.window)
        competitor = subprocess.Popen([sys.executable, "-c", COMPETITOR.format(gpu=1, seconds=600)])
        time.sleep(8)  # the competitor's start-up, then the ranks' medians follow the slowdown
        result["before_samples_per_s"] = samples_per_s(hub, args.window)
        snapshot = hub.snapshot()
        job, plan = plan_from_snapshot(snapshot, "bench")
        data = {**plan_to_json(plan), "plan_id": "replanned"}
        result["plan"] = data
        result["ranks_before"] = [{k: r[k] for k in ("rank", "step_time_s", "compute_s", "samples_per_s", "comm_share")}
                                  for r in snapshot["ranks"] if r["job"] == "bench"]
        reply = hub.request_restart("bench", data)
        assert reply["ok"], reply
        wait(lambda: supervisor.restarts >= 1, 300, "the restart")
        wait(lambda: ranks_at(supervisor.resume_step + 20), 240, "steps after the restart")
        result["after_samples_per_s"] = samples_per_s(hub, args.window)
        result["ranks_after"] = [{k: r[k] for k in ("rank", "samples", "step_time_s", "compute_s", "samples_per_s", "comm_share")}
                                 for r in hub.snapshot()["ranks"] if r["job"] == "bench" and r["connected"]]
        fast, before, after = result["fast_samples_per_s"], result["before_samples_per_s"], result["after_samples_per_s"]
        reachable = data["ideal"]["samples_per_s"] * before / data["current"]["samples_per_s"]
        result["reachable_samples_per_s"] = reachable
        result["recovered_of_lost"] = (after - before) / (fast - before) if fast > before else None
        result["recovered_of_reachable"] = (after - before) / (reachable - before) if reachable > before else None
        result["speedup"] = after / before
    finally:
        supervisor.stop()
        thread.join(timeout=60)
        if competitor is not None:
            competitor.kill()
        server.stop()
        hub.stop()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    main()
