"""The agent's CUDA loss values on a real GPU, read on its sender thread: right, and never a sync.

Since the step ring (agent/step_ring.py), the training thread only files each step; the sender
thread copies a CUDA loss to pinned memory and reads it once its event has completed. This runs
STEPS steps whose loss is a CUDA tensor from real GPU work, under torch's sync debug mode set to
"error" (a synchronising call on any thread raises), with the agent connected to a live hub; then,
outside the timed loop and with sync debug off, it compares the hub's loss history for the rank
with the losses themselves. Needs a GPU and a running hub (--hub SOCKET).

    python benchmarks/agent_cuda_check.py --hub /tmp/x/hub.sock --out agent_cuda_check.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).parents[1]))  # after the installed packages: gpumix.agent is agent/

from gpumix.agent.core import Agent  # noqa: E402
from gpumix.hub.client import HubClient  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hub", required=True, help="a running hub's socket")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the script itself")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    x = torch.randn(2048 if cuda else 64, 2048 if cuda else 64, device=args.device)
    agent = Agent(args.hub, job="cuda-check")
    losses: list[torch.Tensor] = []
    errors: list[str] = []
    if cuda:
        torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(args.steps):
            with agent.step(samples=32) as record:
                y = (x @ x).tanh_()
                loss = y.mean() + step * 1e-3  # distinct values, computed on the GPU
                record.loss = loss
            losses.append(loss.detach())
    except RuntimeError as error:  # a synchronising call under sync debug "error"
        errors.append(str(error)[:300])
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
    if cuda:
        torch.cuda.synchronize()
    agent.close(5.0)
    truth = [float(value) for value in losses]
    client = HubClient(args.hub, timeout_s=5.0)
    rows: list[dict] = []
    for _ in range(50):  # the last steps reach the hub within its next tick
        snapshot = client.snapshot() or {}
        rows = [r for r in snapshot.get("ranks", []) if r.get("job") == "cuda-check"]
        if rows and rows[0].get("step") == args.steps - 1:
            break
        time.sleep(0.2)
    history = rows[0].get("loss_history", []) if rows else []
    tail = truth[-len(history):] if history else []
    mismatches = [(i, h, t) for i, (h, t) in enumerate(zip(history, tail, strict=True))
                  if h is None or not math.isclose(h, t, rel_tol=1e-6, abs_tol=1e-6)]
    result = {"steps": args.steps, "sync_errors": errors, "hub_last_step": rows[0].get("step") if rows else None,
              "history_compared": len(history), "mismatches": mismatches[:10], "dropped": agent.dropped,
              "gpu": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
              "ok": not errors and bool(history) and not mismatches}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
