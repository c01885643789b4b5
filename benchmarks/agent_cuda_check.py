"""The agent's CUDA loss values on a real GPU: copied only on the steps the sampling rule picks
(agent/sampling.py), read on the sender thread, right, and never a sync.

This runs STEPS steps whose loss is a CUDA tensor from real GPU work, under torch's sync debug mode
set to "error" (a synchronising call on any thread raises), with the agent connected to a live hub.
Every PAUSE_EVERY steps the loop pauses PAUSE_S (a stalled loader): the step after a pause must copy
its loss, the fast steps between pauses must not (they end within DEVICE_READ_INTERVAL_S of the
last copy). Then, outside the loop and with sync debug off, it replays the rule on the steps' own end
times (record.end_s) and compares: the steps the agent copied (its count), and the hub's loss
history for the rank against the losses of the steps the rule picks. Needs a GPU and a running hub
(--hub SOCKET); --device cpu is a dry run of the script (CPU values are read every step).

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


def expected_copies(ends_s: list[float], interval_s: float) -> list[int]:
    """The steps the rule picks, replayed on their end times: the first, then each step ending
    interval_s or more after the last one picked (every step here has a CUDA loss)."""
    picked: list[int] = []
    for index, end_s in enumerate(ends_s):
        if not picked or end_s - ends_s[picked[-1]] >= interval_s:
            picked.append(index)
    return picked


def run_steps(agent: Agent, args: argparse.Namespace, x: torch.Tensor) -> tuple[list, list[float], list[str]]:
    """The training loop under sync debug "error": (losses, the steps' end times, sync errors)."""
    losses: list[torch.Tensor] = []
    ends_s: list[float] = []
    errors: list[str] = []
    if args.device == "cuda":
        torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(args.steps):
            if step and step % args.pause_every == 0:
                time.sleep(args.pause_s)  # a stalled loader: the next step copies its loss
            with agent.step(samples=32) as record:
                y = (x @ x).tanh_()
                loss = y.mean() + step * 1e-3  # distinct values, computed on the GPU
                record.loss = loss
            losses.append(loss.detach())
            ends_s.append(record.end_s)
    except RuntimeError as error:  # a synchronising call under sync debug "error"
        errors.append(str(error)[:300])
    finally:
        if args.device == "cuda":
            torch.cuda.set_sync_debug_mode("default")
    return losses, ends_s, errors


def hub_row(client: HubClient, steps: int) -> dict:
    """The rank's row once the last step reached the hub (within its next tick)."""
    rows: list[dict] = []
    for _ in range(50):
        snapshot = client.snapshot() or {}
        rows = [r for r in snapshot.get("ranks", []) if r.get("job") == "cuda-check"]
        if rows and rows[0].get("step") == steps - 1:
            break
        time.sleep(0.2)
    return rows[0] if rows else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hub", required=True, help="a running hub's socket")
    parser.add_argument("--steps", type=int, default=240)
    parser.add_argument("--pause-every", type=int, default=3, help="pause before every Nth step (default 3)")
    parser.add_argument("--pause-s", type=float, default=0.12, help="the pause, s (default 0.12)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the script itself")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    x = torch.randn(2048 if cuda else 64, 2048 if cuda else 64, device=args.device)
    agent = Agent(args.hub, job="cuda-check")
    losses, ends_s, errors = run_steps(agent, args, x)
    if cuda:
        torch.cuda.synchronize()
    agent.close(5.0)
    truth = [float(value) for value in losses]
    picked = expected_copies(ends_s, agent.sampling.interval_s) if cuda else list(range(len(truth)))
    after_pause = [i for i in range(args.pause_every, len(truth), args.pause_every)]
    row = hub_row(HubClient(args.hub, timeout_s=5.0), args.steps)
    history = row.get("loss_history", [])
    expected = [truth[i] for i in picked][-len(history):] if history else []
    mismatches = [(i, h, t) for i, (h, t) in enumerate(zip(history, expected, strict=False))
                  if h is None or not math.isclose(h, t, rel_tol=1e-6, abs_tol=1e-6)]
    copies = agent.sampling.copies if cuda else len(truth)
    result = {"steps": args.steps, "pause_every": args.pause_every, "pause_s": args.pause_s,
              "interval_s": agent.sampling.interval_s, "sync_errors": errors, "hub_last_step": row.get("step"),
              "copies": copies, "expected_copies": len(picked), "first_step_copied": bool(picked) and picked[0] == 0,
              "after_pause_copied": set(after_pause) <= set(picked), "history_compared": len(history),
              "history_expected": len(expected), "mismatches": mismatches[:10], "dropped": agent.dropped,
              "gpu": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__}
    result["ok"] = (not errors and bool(history) and not mismatches and len(history) == len(expected)
                    and copies == len(picked) and result["first_step_copied"] and result["after_pause_copied"]
                    and (not cuda or len(picked) < len(truth)))
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
