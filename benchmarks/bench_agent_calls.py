"""What one agent step costs on the training thread, in microseconds (median of N).

    python benchmarks/bench_agent_calls.py [--device cuda] [--steps 2000]
Times `with agent.step(...) as s: s.loss = tensor` around an empty body, with the
agent sending to a hub that is absent (the cost the training thread pays is the same).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from gpumix.agent.core import Agent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--out")
    args = parser.parse_args()
    loss = torch.ones((), device=args.device)
    agent = Agent("/nonexistent/hub.sock", job="bench", max_messages=64)
    times = []
    for _ in range(args.steps):
        started = time.perf_counter()
        with agent.step(samples=256) as step:
            step.loss = loss
        times.append(time.perf_counter() - started)
    if args.device == "cuda":
        torch.cuda.synchronize()
    agent.close(timeout_s=0.1)
    result = {"device": args.device, "steps": args.steps, "median_us": statistics.median(times) * 1e6,
              "p90_us": sorted(times)[int(0.9 * len(times))] * 1e6}
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as out:
            json.dump(result, out)


if __name__ == "__main__":
    main()
