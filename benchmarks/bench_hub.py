"""The hub under load: how many step messages it ingests, and how soon a step shows.

(a) Ingest. One HubServer in this process, pinned (with its asyncio thread) to
one core; M agent connections, each its own process pinned to the other
cores, blast realistic step frames as fast as the socket takes them. The rate
is what the hub processed: calls of Hub.agent_step (a counting wrapper) over a
measuring window after a warm-up. Goal: >= 20 000 messages/s.

(b) Latency. N real gpumix.agent.Agent processes (RANK 0..N-1) step at R steps/s
in lock step for D seconds while a viewer asks for a snapshot 10 times a second.
A step is visible in hub.snapshot() from the moment Hub.agent_step returns for
it (snapshot() merges ranks on demand under the same lock), so that moment is
recorded per (rank, step). Reported, in ms:
  - delivery: from the agent handing the record to its sender (the end of the
    NEXT step: the agent reports each step one step late, by design) to visible;
  - end_to_end: from the end of the reported step itself to visible, so it
    includes the one-step lag (1/R s, 50 ms at 20 steps/s).
Goal: end-to-end p99 <= 100 ms.

    .venv/bin/python benchmarks/bench_hub.py                       # both, JSON on stdout
    .venv/bin/python benchmarks/bench_hub.py --out /tmp/hub.json --ingest-agents 1,4,16
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.hub.client import HubClient
from gpumix.hub.server import HubServer
from gpumix.sim.rig import load_builtin_rig
from gpumix.wire import protocol

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests.waiting
from tests.waiting import wait_until  # noqa: E402

GOAL_INGEST_PER_S = 20_000
GOAL_P99_MS = 100.0


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def summary_ms(seconds: list[float]) -> dict[str, Any]:
    values = [s * 1000 for s in seconds]
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(statistics.median(values), 2), "p90": round(percentile(values, 90), 2),
            "p99": round(percentile(values, 99), 2), "max": round(max(values), 2)}


def pin(cores: set[int]) -> None:
    if hasattr(os, "sched_setaffinity") and cores:
        os.sched_setaffinity(0, cores)


def all_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def make_hub() -> Hub:
    hub = Hub(simulated_hardware(load_builtin_rig("mixed-10")))
    hub.tick()  # one hardware snapshot; no sampler thread: the server is what is measured
    return hub


# -- (a) ingest ------------------------------------------------------------------------------


def step_message(index: int) -> dict[str, Any]:
    """What an agent sends for a step (the fields Agent._message fills on a CUDA rank)."""
    return {"type": "step", "step": index, "t": time.time(), "step_time_s": 0.1234, "samples": 32,
            "tokens": 65536, "loss": 2.345678, "lr": 3e-4, "data_wait_s": 0.0012, "comm_s": 0.021,
            "micro_batch": 32, "accumulation_steps": 1, "dropped": 0, "cpu_pct": 101.5,
            "rss_bytes": 3_221_225_472, "mem_allocated_bytes": 8_589_934_592,
            "mem_reserved_bytes": 10_737_418_240, "mem_peak_bytes": 9_663_676_416}


def blaster(path: str, rank: int, cores: list[int], go: Any, stop: Any) -> None:
    pin(set(cores))
    chunk = b"".join(protocol.encode(step_message(i)) for i in range(200))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    sock.sendall(protocol.encode({"type": "hello", "role": "agent", "rank": rank, "pid": os.getpid(),
                                  "job": "bench"}))
    go.wait()
    try:
        while not stop.is_set():
            sock.sendall(chunk)
    except OSError:
        pass
    finally:
        sock.close()


def bench_ingest(agents: int, seconds: float, warmup_s: float, hub_core: int, agent_cores: list[int]) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="gmxb", dir="/tmp")
    path = os.path.join(folder, "hub.sock")
    pin({hub_core})  # threads started from here on (the hub's asyncio thread) inherit it
    hub = make_hub()
    received = [0]
    inner = hub.agent_step

    def counting_step(key: Any, step: dict[str, Any]) -> None:
        inner(key, step)
        received[0] += 1

    hub.agent_step = counting_step  # type: ignore[method-assign]
    server = HubServer(hub, path)
    server.start()
    ctx = mp.get_context("spawn")
    go, stop = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=blaster, args=(path, rank, agent_cores, go, stop), daemon=True) for rank in range(agents)]
    try:
        for proc in procs:
            proc.start()
        wait_until(lambda: server.connections >= agents, 30)  # a slow start is measured all the same
        go.set()
        time.sleep(warmup_s)
        count0, t0 = received[0], time.perf_counter()
        cpu0 = time.process_time()
        time.sleep(seconds)
        count1, t1 = received[0], time.perf_counter()
        cpu1 = time.process_time()
    finally:
        stop.set()
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    rate = (count1 - count0) / (t1 - t0)
    return {"agents": agents, "messages": count1 - count0, "seconds": round(t1 - t0, 3),
            "messages_per_s": round(rate), "hub_cpu_share": round((cpu1 - cpu0) / (t1 - t0), 2),
            "bytes_per_message": len(protocol.encode(step_message(0))), "closed": server.closed_reasons[-3:],
            "goal_met": rate >= GOAL_INGEST_PER_S}


# -- (b) latency -------------------------------------------------------------------------------


def stepping_agent(path: str, rank: int, start_at: float, steps: int, period_s: float, results: Any) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="10")
    from gpumix.agent import Agent

    agent = Agent(path, job="bench")
    ends: list[float] = []
    for index in range(steps):
        with agent.step(samples=8) as step:
            pause = start_at + (index + 1) * period_s - time.monotonic()  # the "compute" of this step
            if pause > 0:
                time.sleep(pause)
            step.loss = 1.0
        ends.append(time.monotonic())  # just after step_end(): the previous record is queued now
    agent.close()
    results.put((rank, ends, agent.sender.dropped, agent.sender.connects))


def bench_latency(agents: int, rate: float, seconds: float, hub_core: int) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="gmxb", dir="/tmp")
    path = os.path.join(folder, "hub.sock")
    pin({hub_core})
    hub = make_hub()
    seen: dict[tuple[int, int], float] = {}
    inner = hub.agent_step

    def timed_step(key: Any, step: dict[str, Any]) -> None:
        inner(key, step)
        seen[(key[1], step["step"])] = time.monotonic()  # visible in hub.snapshot() from here

    hub.agent_step = timed_step  # type: ignore[method-assign]
    server = HubServer(hub, path)
    server.start()
    viewing = threading.Event()

    def viewer() -> None:  # a TUI asking 10x a second, as contention
        client = HubClient(path)
        while not viewing.is_set():
            client.snapshot()
            time.sleep(0.1)
        client.close()

    view_thread = threading.Thread(target=viewer, daemon=True)
    view_thread.start()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    steps = int(rate * seconds)
    start_at = time.monotonic() + 3.0  # time for the spawned processes to start
    procs = [ctx.Process(target=stepping_agent, args=(path, rank, start_at, steps, 1 / rate, results), daemon=True)
             for rank in range(agents)]
    try:
        for proc in procs:
            proc.start()
        collected = [results.get(timeout=seconds + 60) for _ in procs]
        for proc in procs:
            proc.join(5)
    finally:
        viewing.set()
        view_thread.join(2)
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    delivery, end_to_end, missing, dropped = [], [], 0, 0
    for rank, ends, rank_dropped, _connects in collected:
        dropped += rank_dropped
        for index in range(steps - 1):  # the last step is sent by close(), not by a next step
            visible = seen.get((rank, index))
            if visible is None:
                missing += 1
                continue
            end_to_end.append(visible - ends[index])
            delivery.append(visible - ends[index + 1])
    e2e = summary_ms(end_to_end)
    return {"agents": agents, "steps_per_s": rate, "seconds": seconds, "steps_measured": len(end_to_end),
            "missing": missing, "dropped": dropped, "delivery_ms": summary_ms(delivery), "end_to_end_ms": e2e,
            "one_step_lag_ms": round(1000 / rate, 1), "goal_met": bool(end_to_end) and e2e["p99"] <= GOAL_P99_MS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ingest-agents", default="1,4,16", help="comma-separated connection counts (default 1,4,16)")
    parser.add_argument("--ingest-seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--latency-agents", type=int, default=10)
    parser.add_argument("--rate", type=float, default=20.0, help="steps per second per agent (default 20)")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    cores = all_cores()
    hub_core = cores[0]
    agent_cores = cores[1:] or cores
    result: dict[str, Any] = {
        "benchmark": "bench_hub",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": len(cores),
                    "python": platform.python_version(), "platform": platform.platform()},
        "hub_core": hub_core, "agent_cores": agent_cores,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    if not args.skip_ingest:
        result["ingest"] = [bench_ingest(int(m), args.ingest_seconds, args.warmup, hub_core, agent_cores)
                            for m in args.ingest_agents.split(",")]
        result["ingest_goal_per_s"] = GOAL_INGEST_PER_S
    if not args.skip_latency:
        result["latency"] = bench_latency(args.latency_agents, args.rate, args.latency_seconds, hub_core)
        result["latency_goal_p99_ms"] = GOAL_P99_MS
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
