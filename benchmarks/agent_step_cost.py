"""The training thread's work per agent step without a GPU (issue 13): Python calls per step counted by
cProfile (deterministic), the thread's CPU time per step (time.thread_time over the timed steps: on a
loaded box the wall clock's mean is mostly descheduling) and the step's wall time, for an empty step, a CPU loss, and a stand-in CUDA loss on
a step not due to copy (agent/sampling.py: ~99 steps in 100 at 1 ms steps). The stand-in is a torch
tensor whose `is_cuda` and `device` say cuda (Python properties: a little slower than the real ones),
so the agent takes its CUDA branch and, not being due, leaves the value out: no copy is queued.
Runs against whichever gpumix is imported first, so two trees compare alternated in one call:

    .venv/bin/python benchmarks/agent_step_cost.py --tree before=/tmp/tree_before --tree after=. \
        --rounds 3 --out agent_step_cost.json   # each tree: PYTHONPATH=DIR, run in its own process

Without --tree it measures the gpumix on the path and prints one round's figures (the child's mode).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path

ABSENT = "/nonexistent/gpumix-hub.sock"  # no hub: the sender backs off, never collects


def stand_in_cuda_loss():  # noqa: ANN201
    import torch

    class CudaStandIn(torch.Tensor):
        """A 0-d float32 tensor the agent takes for a CUDA one (its attributes only)."""

        @property
        def is_cuda(self) -> bool:  # type: ignore[override]
            return True

        @property
        def device(self) -> torch.device:  # type: ignore[override]
            return torch.device("cuda", 0)

    return torch.Tensor._make_subclass(CudaStandIn, torch.ones(()), True)  # requires grad, as a loss does


def losses() -> dict[str, object]:
    import torch

    return {"empty": None, "cpu_loss": torch.ones(()), "cuda_loss_not_due": stand_in_cuda_loss()}


def new_agent():  # noqa: ANN201
    from gpumix.agent.core import Agent

    agent = Agent(ABSENT, job="step-cost")
    agent.sampling.interval_s = 1e9  # no step is due after this: the not-due branch every step
    agent.sampling.last_s = time.perf_counter()
    return agent


def steps(agent, loss, count: int) -> list[float]:  # noqa: ANN001
    times = []
    for _ in range(count):
        started = time.perf_counter()
        with agent.step(samples=256) as step:
            if loss is not None:
                step.loss = loss
        times.append(time.perf_counter() - started)
    return times


def measure(count: int) -> dict[str, dict[str, float]]:
    """Per case: Python calls per step (cProfile) and the step's median and mean µs (unprofiled)."""
    result = {}
    for case, loss in losses().items():
        agent = new_agent()
        try:
            steps(agent, loss, 200)  # warm
            profile = cProfile.Profile()
            profile.enable()
            steps(agent, loss, 1000)
            profile.disable()
            calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
            cpu_s = time.thread_time()
            timed = steps(agent, loss, count)
            cpu_s = time.thread_time() - cpu_s  # this thread's CPU: a loaded box's descheduling left out
            # the least mean over batches of 200 steps: the step's cost with the least interference
            best_batch_s = min(statistics.fmean(timed[i:i + 200]) for i in range(0, count - 199, 200))
            assert agent.sampling.copies == 0
        finally:
            agent.close(0.1)
        # the profiled loop's own calls: 2 perf_counter and list.append a step, the profiler's disable
        result[case] = {"python_calls_per_step": (calls - 1) / 1000 - 3,
                        "thread_cpu_us_per_step": cpu_s / count * 1e6,  # the loop's own timing calls included
                        "best_batch_mean_us": best_batch_s * 1e6,
                        "median_us": statistics.median(timed) * 1e6, "mean_us": statistics.fmean(timed) * 1e6}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                        help="a gpumix tree to measure (PYTHONPATH=DIR, '.' for the checkout's install); repeat")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds over the trees (default 3)")
    parser.add_argument("--steps", type=int, default=20000, help="timed steps per case and round (default 20000)")
    parser.add_argument("--out", metavar="FILE")
    args = parser.parse_args()
    if not args.tree:
        print(json.dumps(measure(args.steps)))
        return
    rounds: dict[str, list[dict]] = {}
    for _ in range(args.rounds):
        for tree in args.tree:
            label, folder = tree.split("=", 1)
            env = dict(os.environ)
            if folder != ".":
                env["PYTHONPATH"] = str(Path(folder).resolve())
            out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps)], env=env, check=True,
                                 capture_output=True, text=True).stdout
            rounds.setdefault(label, []).append(json.loads(out.strip().splitlines()[-1]))
    summary = {label: {case: {key: {"median": statistics.median(r[case][key] for r in runs),
                                    "range": [min(r[case][key] for r in runs), max(r[case][key] for r in runs)]}
                              for key in runs[0][case]} for case in runs[0]} for label, runs in rounds.items()}
    result = {"command": " ".join(["python", *sys.argv]), "trees": args.tree, "rounds": rounds, "summary": summary,
              "machine": {"cpus": os.cpu_count(), "load_avg_1_5_15": list(os.getloadavg()),
                          "python": sys.version.split()[0]}}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
