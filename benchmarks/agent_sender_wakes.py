"""How often the agent's sender thread wakes with a live hub and steady steps: each wake-up takes the GIL
from the training thread (issue 13). Deterministic: the wake-ups are counted (the sender's _wait returns),
not timed. Run one tree, or alternate two through PYTHONPATH (benchmarks/tree_at.sh lays a commit out):

    python benchmarks/agent_sender_wakes.py --seconds 5 --step-ms 1 --out wakes.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # bench_agent_calls' hub; after the installed packages (PYTHONPATH picks the tree)
import gpumix.agent.sender as sender_module  # noqa: E402
from benchmarks.bench_agent_calls import start_hub  # noqa: E402
from gpumix.agent.core import Agent  # noqa: E402
from gpumix.hub.client import HubClient  # noqa: E402
from tests.waiting import wait_until  # noqa: E402


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def hub_step(address: str, job: str) -> int | None:
    snapshot = HubClient(address, timeout_s=5.0).snapshot() or {}
    steps = [r.get("step") for r in snapshot.get("ranks", []) if r.get("job") == job]
    return max((s for s in steps if s is not None), default=None)


def one_run(address: str, seconds: float, step_s: float, job: str) -> dict:
    agent = Agent(address, job=job)
    wakes: list[float] = []
    inner = agent.sender._wait

    def counting(wait_s: float) -> None:
        inner(wait_s)
        wakes.append(time.monotonic())

    agent.sender._wait = counting  # the sender thread looks it up at each wait
    steps = 0
    try:
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            with agent.step(samples=8) as step:
                spin(step_s)
                step.loss = 1.0
            steps += 1
        ended = time.monotonic()
        woken = sum(1 for t in wakes if started <= t <= ended)
    finally:
        agent.close()
    wait_until(lambda: hub_step(address, job) == steps - 1, 20, "the hub to receive the steps")
    return {"seconds": ended - started, "steps": steps, "wakes": woken, "wakes_per_s": woken / (ended - started),
            "sent": agent.sender.sent, "dropped": agent.dropped, "period_s": agent.sender.period_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--step-ms", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        hub, address = start_hub(Path(folder))
        try:
            runs = [one_run(address, args.seconds, args.step_ms / 1000, f"bench-sender-wakes-{run}")
                    for run in range(args.runs)]
        finally:
            hub.terminate()
            hub.wait(10)
    result = {"sender": sender_module.__file__, "runs": runs}
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
