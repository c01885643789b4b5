"""The CPU-forwarding finding on real ranks: one DDP job (examples/ddp_train.py) under a running hub,
`gpumix doctor --json` attached to that hub once the ranks report their communication share, and
the snapshot's rank and GPU figures beside it, in one JSON file.

    python3 benchmarks/cpu_forwarding_run.py --hub /tmp/hub.sock --label shm --out shm.json -- \
        --width 8192 --batch 256 --nccl-probe
(the job's arguments after --; NCCL_P2P_DISABLE comes from the environment). The job is stopped
once doctor has answered. Reads the hub only; changes no GPU setting.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: gpumix, tests.waiting
from gpumix.hub.client import HubClient  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RANK_KEYS = ("rank", "job", "gpu_uuid", "connected", "step", "step_time_s", "compute_s", "samples_per_s",
             "comm_share", "data_wait_share", "gradient_bytes", "transport", "env")
GPU_KEYS = ("index", "uuid", "name", "pcie_gen_max", "pcie_width_max", "pcie_link_bytes_per_s_max",
            "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "pcie_rx_link_share", "pcie_tx_link_share",
            "util_gpu_pct")


def live_ranks(client: HubClient) -> list[dict[str, Any]]:
    snapshot = client.snapshot() or {}
    return [r for r in snapshot.get("ranks", []) if r.get("connected") and r.get("job") == "ddp-example"]


def reporting(client: HubClient, min_step: int) -> bool:
    """Both ranks past the warm-up, with a step time and a communication share measured (compute_s
    may be 0: a step that is all exposed communication)."""
    ranks = live_ranks(client)
    return (len(ranks) == 2 and all((r.get("step") or 0) >= min_step and r.get("comm_share") is not None
                                    and r.get("step_time_s") for r in ranks))


def stop_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(f"signal {signum}")  # the finally below stops the job and writes what was seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hub", required=True, help="the running hub's socket")
    parser.add_argument("--label", required=True)
    parser.add_argument("--min-step", type=int, default=150, help="steps before doctor is asked")
    parser.add_argument("--settle", type=float, default=4.0, help="seconds of readings after --min-step")
    parser.add_argument("--wait", type=float, default=40.0, help="seconds to wait for both ranks reporting")
    parser.add_argument("--out", required=True)
    parser.add_argument("job", nargs=argparse.REMAINDER, help="-- then examples/ddp_train.py's arguments")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    job_args = args.job[1:] if args.job[:1] == ["--"] else args.job
    env = {**os.environ, "GPUMIX_HUB": args.hub, "NCCL_NVLS_ENABLE": "0"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(ROOT / "examples" / "ddp_train.py"), "--steps", "1000000", *job_args]
    job = subprocess.Popen(command, env=env, start_new_session=True)
    client = HubClient(args.hub)
    result: dict[str, Any] = {"label": args.label, "command": command,
                              "nccl_p2p_disable": os.environ.get("NCCL_P2P_DISABLE")}
    try:
        if not wait_until(lambda: reporting(client, args.min_step), args.wait, poll_s=0.5):
            result["not_reporting"] = f"both ranks did not report within {args.wait:.0f} s"
        time.sleep(args.settle)  # a few of the agent's once-a-second DDP timer readings
        doctor = subprocess.run([sys.executable, "-m", "gpumix.cli.main", "doctor", "--json", "--hub", args.hub],
                                capture_output=True, text=True, timeout=60, cwd=ROOT)
        snapshot = client.snapshot() or {}
        result["doctor_exit"] = doctor.returncode
        result["doctor"] = json.loads(doctor.stdout) if doctor.stdout.strip() else {"stderr": doctor.stderr}
        result["ranks"] = [{k: r.get(k) for k in RANK_KEYS} for r in live_ranks(client)]
        result["gpus"] = [{k: g.get(k) for k in GPU_KEYS} for g in snapshot.get("gpus", [])]
        result["host"] = snapshot.get("host")
        result["run"] = snapshot.get("run")
        result["snapshot"] = snapshot  # the whole of it: the advisor can be run on it again offline
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    ids = [f.get("id") for f in result.get("doctor", {}).get("findings", [])]
    print(args.label, "doctor exit", result.get("doctor_exit"), "findings", ids, flush=True)
    for rank in result.get("ranks", []):
        print(args.label, "rank", rank["rank"], "step", rank["step_time_s"], "compute", rank["compute_s"],
              "comm_share", rank["comm_share"], flush=True)


if __name__ == "__main__":
    main()
