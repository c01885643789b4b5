"""What the agent's sender thread costs per step (issue 13): while it builds and writes a batch it holds
the GIL, and a training thread that wants it back waits. Two deterministic-leaning figures per tree:

- build: a full ring of ended steps (1 ms apart is not needed: the steps are filed back to back, a float
  loss and lr each, as a plain loop sets them) taken, built, encoded and written by the sender's own
  `_pump` into a socket stand-in, on this thread: Python calls per step (cProfile, exact) and this
  thread's CPU per step (time.thread_time, the least of --repeats), bytes per step written;
- live (--live-seconds > 0): a real hub (`gpumix hub --sim mixed-10`), steady steps of --step-ms spun
  on the main thread, the sender thread's CPU in `_pump` per step and per wake-up (time.thread_time
  inside that thread), and the training thread's time in the agent's calls per step (noisy on a loaded box).

Alternate trees in one call (each child: PYTHONPATH=DIR; benchmarks/tree_at.sh lays a commit out):

    .venv/bin/python benchmarks/agent_sender_cost.py --tree before=/tmp/tree_before --tree after=. \
        --rounds 3 --live-seconds 5 --out benchmarks/results/agent_sender_cost_s9_2026-12-02.json
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
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ABSENT = "/nonexistent/gpumix-hub.sock"  # no hub: the sender thread backs off and never collects


class SocketStandIn:
    """What the sender writes to: counts the bytes."""

    def __init__(self) -> None:
        self.bytes = 0

    def sendall(self, data: bytes) -> None:
        self.bytes += len(data)


def fill(agent, count: int) -> None:  # noqa: ANN001
    for index in range(count):
        with agent.step(samples=256) as step:
            step.loss = 2.0 + index * 1e-4
            step.lr = 1e-3


def build(steps: int, repeats: int) -> dict:
    """The sender's _pump over `steps` ready steps, on this thread (the sender thread never connects)."""
    from gpumix.agent.core import Agent

    agent = Agent(ABSENT, job="sender-cost")
    cpu_us, calls, sent_bytes = [], [], 0
    try:
        for repeat in range(repeats + 1):
            fill(agent, steps + (repeat == 0))  # the newest waits for the next one: `steps` are ready
            out = SocketStandIn()
            profile = cProfile.Profile() if repeat == 0 else None
            taken = agent._ring.taken
            started = time.thread_time()
            if profile is not None:
                profile.enable()
            agent.sender._pump(out, False)
            if profile is not None:
                profile.disable()
            cpu_s = time.thread_time() - started
            collected = agent._ring.taken - taken
            assert collected == steps, (collected, steps)
            if profile is not None:  # the profiled round counts calls; the others time
                calls.append(pstats.Stats(profile).total_calls / steps)  # type: ignore[attr-defined]
                sent_bytes = out.bytes
            else:
                cpu_us.append(cpu_s / steps * 1e6)
    finally:
        agent.close(0.1)
    return {"steps": steps, "python_calls_per_step": calls[0], "cpu_us_per_step_min": min(cpu_us),
            "cpu_us_per_step_median": statistics.median(cpu_us), "bytes_per_step": sent_bytes / steps}


def spin(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def live(seconds: float, step_ms: float) -> dict:
    """Steady steps against a live hub: the sender thread's CPU per step, the training thread's agent calls."""
    sys.path.append(str(ROOT))  # bench_agent_calls' hub; after the tree on PYTHONPATH
    from benchmarks.bench_agent_calls import start_hub
    from gpumix.agent.core import Agent
    from tests.waiting import wait_until

    with tempfile.TemporaryDirectory(prefix="gpumix-sender-cost-") as folder:
        hub, address = start_hub(Path(folder))
        try:
            agent = Agent(address, job="sender-cost-live")
            pumps: list[float] = []
            inner = agent.sender._pump

            def timed_pump(sock, closing: bool) -> None:  # noqa: ANN001  (the sender thread's own CPU)
                started = time.thread_time()
                try:
                    inner(sock, closing)
                finally:
                    pumps.append(time.thread_time() - started)

            agent.sender._pump = timed_pump  # looked up at each send
            fill(agent, 2)
            wait_until(lambda: agent.sender.connects >= 1, 30, "the agent to connect")
            pumps.clear()
            sent = agent.sender.sent
            times = []
            step_s = step_ms / 1000
            ended_at = time.perf_counter() + seconds
            cpu_main = time.thread_time()
            while time.perf_counter() < ended_at:
                started = time.perf_counter()
                step = agent.step(samples=256)
                begun = time.perf_counter()
                spin(step_s)
                ending = time.perf_counter()
                step.loss = 2.0
                step.lr = 1e-3
                step.__exit__(None, None, None)
                times.append(begun - started + time.perf_counter() - ending)
            cpu_main = time.thread_time() - cpu_main
            pump_cpu = list(pumps)
            steps_sent = agent.sender.sent - sent
            agent.close(5.0)
        finally:
            hub.terminate()
            hub.wait(10)
    steps = len(times)
    return {"seconds": seconds, "step_ms": step_ms, "steps": steps, "sends": len(pump_cpu), "steps_sent": steps_sent,
            "sender_cpu_us_per_step": sum(pump_cpu) / steps * 1e6,
            "sender_cpu_ms_per_send": statistics.fmean(pump_cpu) * 1e3 if pump_cpu else None,
            "agent_calls_mean_us": statistics.fmean(times) * 1e6, "agent_calls_median_us": statistics.median(times) * 1e6,
            "training_thread_cpu_share": cpu_main / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                        help="a gpumix tree (PYTHONPATH=DIR, '.' for the checkout's install); repeat")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds over the trees (default 3)")
    parser.add_argument("--steps", type=int, default=1000, help="ready steps per build (default 1000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed builds per round (default 5)")
    parser.add_argument("--live-seconds", type=float, default=0.0, help="live-hub seconds per round (default 0: none)")
    parser.add_argument("--step-ms", type=float, default=1.0, help="live steps' length (default 1 ms)")
    parser.add_argument("--out", metavar="FILE")
    args = parser.parse_args()
    if not args.tree:
        result = {"build": build(args.steps, args.repeats)}
        if args.live_seconds > 0:
            result["live"] = live(args.live_seconds, args.step_ms)
        print(json.dumps(result))
        return
    rounds: dict[str, list[dict]] = {}
    for _ in range(args.rounds):
        for tree in args.tree:
            label, folder = tree.split("=", 1)
            env = dict(os.environ)
            if folder != ".":
                env["PYTHONPATH"] = str(Path(folder).resolve())
            command = [sys.executable, __file__, "--steps", str(args.steps), "--repeats", str(args.repeats),
                       "--live-seconds", str(args.live_seconds), "--step-ms", str(args.step_ms)]
            out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
            rounds.setdefault(label, []).append(json.loads(out.strip().splitlines()[-1]))
    summary = {label: {part: {key: {"median": statistics.median(r[part][key] for r in runs),
                                    "range": [min(r[part][key] for r in runs), max(r[part][key] for r in runs)]}
                              for key, value in runs[0][part].items() if isinstance(value, int | float)}
                       for part in runs[0]} for label, runs in rounds.items()}
    result = {"command": " ".join(["python", *sys.argv]), "trees": args.tree, "rounds": rounds, "summary": summary,
              "machine": {"cpus": os.cpu_count(), "load_avg_1_5_15": list(os.getloadavg()),
                          "python": sys.version.split()[0]}}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
