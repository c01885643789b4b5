"""What one agent step costs on the training thread, in microseconds: median and p99 per call,
without a hub and with a live one, alternated in pairs so that drift hits both alike.

    python benchmarks/bench_agent_calls.py --out agent_calls.json          # both cases, 3 pairs
    python benchmarks/bench_agent_calls.py --case no-hub --out no_hub.json  # one case only
    python benchmarks/bench_agent_calls.py --hub-socket /tmp/gpumix-hub.sock --out calls.json
    python benchmarks/bench_agent_calls.py --body-us 1000 --steps 2000 --out ms_steps.json   # 1 ms steps
    python benchmarks/bench_agent_calls.py --device-read-interval 0 --out every.json  # each step copies

Each run times `with agent.step(samples=256) as s: s.loss = loss` around an empty body, `--steps`
times, with a fresh Agent (loss: a one-element tensor on --device, cuda when there is one).
no-hub: the agent's hub address does not exist (its sender backs off and retries).
hub: a live hub, `gpumix hub --sim mixed-10 --socket TMP` started here in its own process (or the
hub at --hub-socket); the run counts only when its agent connected and the hub received its steps.
A CUDA loss is copied from the GPU only on the steps the agent's sampling picks (agent/sampling.py:
the first, then two a send period: one each 0.5 s at the default 1 s; older agents one each 0.1 s); `--device-read-interval 0` makes every step copy (the agent
before sampling), and each run's `device_copies` says how many steps copied. `--body-us N` spins N µs
inside each step (a step of a real length, so that the copying steps count in the p99) and times only
the agent's calls around it. With --profile FILE, one more run under cProfile (the training thread's calls; with the hub when
there is one) writes its stats to FILE and its top functions by own time into the JSON.
The JSON holds every run, each case's median of run medians and p99s, the machine and its load, and each
run's `bare_step_median_us`: the same timing around a `with` that does nothing (none of the agent's code),
taken right after the run, so that a run slow because the machine was slow shows it.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # tests.waiting; after the installed packages (the checkout has no gpumix.agent)
from gpumix.agent.core import Agent  # noqa: E402
from gpumix.hub.client import HubClient  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

JOB = "bench-agent-calls"
ABSENT = "/nonexistent/gpumix-hub.sock"


def start_hub(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A real hub process on the simulated mixed-10 rig (no GPUs needed, no demo job)."""
    path = str(folder / "hub.sock")
    hub = subprocess.Popen([sys.executable, "-m", "gpumix.cli.main", "hub", "--sim", "mixed-10", "--socket", path],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: HubClient(path, timeout_s=1.0).snapshot() is not None, 60, "the hub to answer")
    return hub, path


def hub_steps(address: str) -> int | None:
    """The step the hub last received from this benchmark's agent."""
    snapshot = HubClient(address, timeout_s=5.0).snapshot() or {}
    steps = [r.get("step") for r in snapshot.get("ranks", []) if r.get("job") == JOB]
    return max((s for s in steps if s is not None), default=None)


def spin(seconds: float) -> None:
    """A step's work without sleeping (a sleep would hand the GIL and the core away)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def timed_steps(agent: Agent, steps: int, loss: torch.Tensor, body_s: float,
                gpu_work: int = 0) -> tuple[list[float], list[bool]]:
    """Seconds per step spent in the agent's calls (the body not counted), and whether each step
    copied its CUDA values (agent/sampling.py), so that those steps are told apart from the rest.
    gpu_work N: the body also queues an N x N matmul and the loss is its mean, a new CUDA tensor each
    step as in training (the GPU busy, never idle for the 0.1 s between two copies)."""
    matrix = torch.randn(gpu_work, gpu_work, device=loss.device) if gpu_work > 0 else None
    times, copied = [], []
    sampling = agent.sampling
    if body_s <= 0:  # the whole `with` around an empty body, as the earlier figures were taken
        for _ in range(steps):
            copies = sampling.copies
            started = time.perf_counter()
            with agent.step(samples=256) as step:
                step.loss = loss
            times.append(time.perf_counter() - started)
            copied.append(sampling.copies != copies)
        return times, copied
    for _ in range(steps):
        copies = sampling.copies
        started = time.perf_counter()
        context = agent.step(samples=256)
        step = context.__enter__()
        begun = time.perf_counter()
        fresh = (matrix @ matrix).mean() if matrix is not None else loss
        spin(body_s)
        ending = time.perf_counter()
        step.loss = fresh
        context.__exit__(None, None, None)
        times.append(begun - started + time.perf_counter() - ending)
        copied.append(sampling.copies != copies)
    return times, copied


class BareStep:
    """The machine's speed on this path, none of the agent's code: a `with` whose record takes the loss
    and does nothing else. Timed in each run right after the agent's steps, the same way (this VM's runs
    differ 3-fold in their medians: the reference tells a slow machine from a slow agent)."""

    __slots__ = ("loss",)

    def __enter__(self) -> BareStep:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def bare_steps_us(steps: int, loss: torch.Tensor, body_s: float) -> float:
    """The median µs of `steps` bare steps timed as timed_steps times the agent's."""
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        context = BareStep()
        step = context.__enter__()
        begun = time.perf_counter()
        spin(body_s)
        ending = time.perf_counter()
        step.loss = loss
        context.__exit__(None, None, None)
        times.append(begun - started + time.perf_counter() - ending)
    return statistics.median(times) * 1e6


def spread_us(times: list[float]) -> dict:
    """Count, median, mean, p99 and max of some steps' times, in µs (None when there are none)."""
    if not times:
        return {"count": 0, "median_us": None, "mean_us": None, "p99_us": None, "max_us": None}
    ordered = sorted(times)
    return {"count": len(ordered), "median_us": statistics.median(ordered) * 1e6,
            "mean_us": statistics.fmean(ordered) * 1e6, "p99_us": ordered[int(0.99 * len(ordered))] * 1e6,
            "max_us": ordered[-1] * 1e6}


def one_run(address: str, steps: int, loss: torch.Tensor, args: argparse.Namespace,
            profile: cProfile.Profile | None = None) -> dict:
    agent = Agent(address, job=JOB)
    if args.device_read_interval is not None:
        agent.sampling.interval_s = args.device_read_interval
    if address != ABSENT:  # the agent's first message opens its connection: wait for it, then time
        with agent.step(samples=256) as step:
            step.loss = loss
        with agent.step(samples=256) as step:
            step.loss = loss
        wait_until(lambda: agent.sender.connects >= 1, 30, "the agent to connect")
    if profile is not None:
        profile.enable()
    times, copied = timed_steps(agent, steps, loss, args.body_us * 1e-6, args.gpu_work)
    if profile is not None:
        profile.disable()
    if loss.device.type == "cuda":
        torch.cuda.synchronize()
    bare_us = bare_steps_us(min(steps, 1000), loss, args.body_us * 1e-6)
    connects, last_step = agent.sender.connects, agent.steps - 1
    copies = agent.sampling.copies
    agent.close(timeout_s=5.0 if address != ABSENT else 0.1)
    dropped = agent.dropped  # steps overwritten in the ring and messages dropped from the queue (was the queue's only)
    received = None
    if address != ABSENT:  # the hub got the steps: the connected case really was connected
        received = wait_until(lambda: hub_steps(address) == last_step, 30) and last_step
    times_in_order = list(times)
    times.sort()
    return {"mean_us": statistics.fmean(times) * 1e6, "median_us": statistics.median(times) * 1e6, "p90_us": times[int(0.90 * len(times))] * 1e6,
            "p99_us": times[int(0.99 * len(times))] * 1e6, "max_us": times[-1] * 1e6,
            "connects": connects, "dropped": dropped, "hub_last_step": received, "steps": steps,
            "send_period_s": agent.sender.period_s, "device_read_interval_s": agent.sampling.interval_s,
            "device_copies": copies, "bare_step_median_us": bare_us,
            # the steps that copied CUDA values and the others apart: which of them makes the tail
            "copying_steps": spread_us([t for t, c in zip(times_in_order, copied, strict=True) if c]),
            "other_steps": spread_us([t for t, c in zip(times_in_order, copied, strict=True) if not c])}


def top_functions(stats: pstats.Stats, count: int = 12) -> list[dict]:
    """The profiled run's functions by own time: calls, and microseconds per call, own and cumulative."""
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:count]  # type: ignore[attr-defined]
    return [{"function": f"{Path(file).name}:{line}({name})", "calls": calls,
             "own_us_per_call": own / calls * 1e6, "cumulative_us_per_call": cumulative / calls * 1e6}
            for (file, line, name), (_, calls, own, cumulative, _) in rows]


def summary(runs: list[dict]) -> dict:
    return {"runs": runs, "mean_us": statistics.median(r["mean_us"] for r in runs),
            "median_us": statistics.median(r["median_us"] for r in runs),
            "p99_us": statistics.median(r["p99_us"] for r in runs),
            "median_us_range": [min(r["median_us"] for r in runs), max(r["median_us"] for r in runs)],
            "p99_us_range": [min(r["p99_us"] for r in runs), max(r["p99_us"] for r in runs)],
            "other_steps_mean_us": statistics.median(r["other_steps"]["mean_us"] for r in runs),
            "bare_step_median_us": statistics.median(r["bare_step_median_us"] for r in runs),
            "other_steps_p99_us": statistics.median(r["other_steps"]["p99_us"] for r in runs),
            "copying_steps_mean_us": statistics.median(m for r in runs if (m := r["copying_steps"]["mean_us"]) is not None)
            if any(r["copying_steps"]["count"] for r in runs) else None}


def clock_cost_ns(calls: int = 200_000) -> float:
    """One time.perf_counter() call, ns (the agent reads the clock twice a step, this benchmark twice
    more in the timed part of a step with a body: on a VM whose clock source is no TSC it is a syscall)."""
    clock = time.perf_counter
    started = clock()
    for _ in range(calls):
        clock()
    return (clock() - started) / calls * 1e9


def clock_source() -> str | None:
    try:
        return Path("/sys/devices/system/clocksource/clocksource0/current_clocksource").read_text().strip()
    except OSError:
        return None


def machine() -> dict:
    return {"cpus": os.cpu_count(), "load_avg_1_5_15": list(os.getloadavg()), "python": platform.python_version(),
            "perf_counter_ns": clock_cost_ns(), "clock_source": clock_source(),
            "torch": torch.__version__, "platform": platform.platform(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where the loss tensor lives (default: cuda when there is one)")
    parser.add_argument("--steps", type=int, default=5000, help="timed steps per run (default 5000)")
    parser.add_argument("--pairs", type=int, default=3, help="runs per case, alternated ABBA (default 3)")
    parser.add_argument("--case", choices=("both", "no-hub", "hub"), default="both",
                        help="without a hub, with a live hub, or both alternated (default both)")
    parser.add_argument("--gpu-work", type=int, default=0, metavar="N",
                        help="with --body-us: each step also queues an N x N matmul and its mean is the loss (default 0: off)")
    parser.add_argument("--body-us", type=float, default=0.0,
                        help="spin this many µs inside each step; only the agent's calls are timed (default 0)")
    parser.add_argument("--device-read-interval", type=float, metavar="S",
                        help="the agent's sampling interval for CUDA values, s (default: the agent's own; 0: every step)")
    parser.add_argument("--hub-socket", metavar="PATH", help="a running hub's socket (default: start one)")
    parser.add_argument("--profile", metavar="FILE", help="profile one more hub run; pstats text to FILE")
    parser.add_argument("--out", metavar="FILE", help="write the JSON here (it is printed too)")
    args = parser.parse_args()
    loss = torch.ones((), device=args.device)
    cases = ["no-hub", "hub"] if args.case == "both" else [args.case]
    hub_process = None
    address = args.hub_socket
    with tempfile.TemporaryDirectory(prefix="gpumix-bench-") as folder:
        try:
            if "hub" in cases and address is None:
                hub_process, address = start_hub(Path(folder))
            runs: dict[str, list[dict]] = {case: [] for case in cases}
            for pair in range(args.pairs):
                # ABBA: every other pair runs its cases in the other order, so that a drift of the machine
                # within a pair (this VM's run medians spread 4-11 µs for one case) does not favour one case
                for case in cases if pair % 2 == 0 else cases[::-1]:
                    runs[case].append(one_run(ABSENT if case == "no-hub" else address, args.steps, loss, args))
            profile_top = None
            if args.profile:
                profile = cProfile.Profile()
                one_run(address or ABSENT, args.steps, loss, args, profile)
                with open(args.profile, "w") as stream:
                    stats = pstats.Stats(profile, stream=stream).sort_stats("tottime")
                    stats.print_stats(25)
                profile_top = top_functions(stats)
        finally:
            if hub_process is not None:
                hub_process.terminate()
                hub_process.wait(10)
    import gpumix

    result = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "gpumix_from": gpumix.__path__[0],
              "device": args.device,
              "steps": args.steps, "pairs": args.pairs, "body_us": args.body_us, "gpu_work": args.gpu_work,
              "device_read_interval_s": runs[cases[0]][0]["device_read_interval_s"], "hub": "started: gpumix hub --sim mixed-10"
              if hub_process is not None else args.hub_socket, "machine": machine(),
              "cases": {case: summary(case_runs) for case, case_runs in runs.items()}, "profile_top": profile_top}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
