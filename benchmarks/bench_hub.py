"""The hub under load: how many step messages it ingests, and how soon a step shows.

(a) Ingest. One HubServer in this process, pinned (with its asyncio thread) to
one core; M agent connections, each its own process pinned to the other
cores, blast realistic step frames as fast as the socket takes them. The rate
is what the hub processed: steps given to Hub.agent_steps (a counting wrapper) over a
measuring window after a warm-up. Goal: >= 20 000 messages/s.

(b) Latency. N real gpumix.agent.Agent processes (RANK 0..N-1) step at R steps/s
in lock step for D seconds while a viewer asks for a snapshot 10 times a second.
A step is visible in hub.snapshot() from the moment Hub.agent_steps returns for
it (snapshot() merges ranks on demand under the same lock), so that moment is
recorded per (rank, step) (Hub.agent_steps returns for all the steps of one read). Reported, in ms:
  - delivery: from the agent handing the record to its sender (the end of the
    NEXT step: the agent reports each step one step late, by design) to visible;
  - end_to_end: from the end of the reported step itself to visible, so it
    includes the one-step lag (1/R s, 50 ms at 20 steps/s).
Goal: end-to-end p99 <= 100 ms (an old goal: the agent sends once a second by default since
session 7, so end to end is about a second; GPUMIX_AGENT_SEND_PERIOD_S=0.1 in the environment, which
the agents inherit, measures the agent that sends ten times a second).

(c) CPU per tick (--tick-cpu, issue 13). A real `gpumix hub` process (default on the real GPUs;
`--hub-command "gpumix hub --demo"` for the simulated rig) at 1 s, with N real agent processes
stepping at R steps/s each, for each N in --tick-ranks; the hub's CPU (user + system, psutil) over
the window, as % of one core and as ms per tick, and its wake-ups a second (voluntary context switches of all
its threads). The difference between rank counts is the cost per
rank, and over the ranks' step rate the cost per step; the hub with no rank is the cost of its GPUs
(and its fixed part). Goal: <= 0.5 % of a core for 10 GPUs and 10 ranks at 1 s. Its agents are CPU
step loops (no GPU needed), so on a GPU machine the hub reads the real GPUs through NVML:

    .venv/bin/python benchmarks/bench_hub.py --tick-cpu --tick-ranks 0,10 --tick-seconds 15 --out hub_tick.json

Where the hub's time goes: the same with the hub under benchmarks/profile_threads.py, e.g.
--hub-command ".venv/bin/python benchmarks/profile_threads.py --out hub.prof --top hub.txt -- -m gpumix.cli.main hub".

    .venv/bin/python benchmarks/bench_hub.py                       # (a) and (b), JSON on stdout
    .venv/bin/python benchmarks/bench_hub.py --out /tmp/hub.json --ingest-agents 1,4,16
    .venv/bin/python benchmarks/bench_hub.py --tick-cpu --tick-ranks 0,10 --hub-command "gpumix hub --demo" --out hub_tick.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.hub.client import HubClient
from gpumix.hub.server import HubServer
from gpumix.sim.rig import load_builtin_rig
from gpumix.wire import protocol

sys.path.append(str(Path(__file__).resolve().parent.parent))  # the repository root: tests.waiting (last:
# its gpumix/ must not shadow an installed gpumix, which has gpumix.agent and gpumix.tui)
from tests.waiting import wait_until  # noqa: E402

GOAL_INGEST_PER_S = 20_000
GOAL_P99_MS = 100.0
GOAL_HUB_CPU_PCT = 0.5  # of one core, 10 GPUs and 10 ranks at 1 s


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


def stop_agents(stop: Any, procs: list[Any]) -> None:
    """Tell the agent processes to stop; one that does not within 5 s is killed."""
    stop.set()
    for proc in procs:
        proc.join(5)
        if proc.is_alive():
            proc.kill()


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
    inner = hub.agent_steps

    def counting_steps(key: Any, steps: list[dict[str, Any]]) -> None:  # the server's one call per read
        inner(key, steps)
        received[0] += len(steps)

    hub.agent_steps = counting_steps  # type: ignore[method-assign]
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
        stop_agents(stop, procs)
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
    results.put((rank, ends, agent.dropped, agent.sender.connects))


def bench_latency(agents: int, rate: float, seconds: float, hub_core: int) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="gmxb", dir="/tmp")
    path = os.path.join(folder, "hub.sock")
    pin({hub_core})
    hub = make_hub()
    seen: dict[tuple[int, int], float] = {}
    inner = hub.agent_steps

    def timed_steps(key: Any, steps: list[dict[str, Any]]) -> None:
        inner(key, steps)
        now = time.monotonic()  # visible in hub.snapshot() from here
        for step in steps:
            seen[(key[2], step["step"])] = now  # RankKey: (job, run id, rank, connection)

    hub.agent_steps = timed_steps  # type: ignore[method-assign]
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


# -- (c) CPU per tick ----------------------------------------------------------------------------


def steady_agent(path: str, rank: int, ranks: int, period_s: float, stop: Any) -> None:
    """A rank stepping every period_s until told to stop (its step is a sleep: the hub is measured)."""
    os.environ.update(RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE=str(ranks), GPUMIX_GPU_UUID="")
    from gpumix.agent import Agent

    agent = Agent(path, job="bench-tick")
    index = 0
    started = time.monotonic()
    while not stop.is_set():
        with agent.step(samples=32) as step:
            index += 1
            pause = started + index * period_s - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            step.loss = 1.0
    agent.close()


def wakeups(pid: int) -> int:
    """The process's voluntary context switches over all its threads (Linux): each is a wait that
    ended, so their rate is the hub's wake-ups a second (issue 13: most of its CPU per rank). 0 elsewhere."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            total += sum(int(line.split()[1]) for line in status.read_text().splitlines()
                         if line.startswith("voluntary_ctxt_switches"))
        except (OSError, ValueError):  # a thread that ended meanwhile
            continue
    return total


def cpu_ns(pid: int) -> int:
    """The process's CPU time in ns over its threads (Linux /proc/PID/task/*/schedstat, first field): psutil's
    cpu_times counts 10 ms clock ticks, a few dozen in a 12 s window of a hub at 0.5 % (session 10). 0 elsewhere."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return total


def view_each_second(path: str, done: threading.Event) -> None:
    """A dashboard's polls: a snapshot asked with "view" once a second (the hub then reads busy GPUs' PCIe
    each tick), until `done`."""
    viewer = HubClient(path)
    viewer.viewing = True
    while not done.is_set():
        viewer.snapshot()
        done.wait(1.0)
    viewer.close()


def bench_tick_cpu(hub_command: list[str], ranks: int, rate: float, seconds: float, warmup_s: float,
                   socket_path: str | None, viewer: bool = False) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="gmxt", dir="/tmp")
    path = socket_path or os.path.join(folder, "hub.sock")
    log = open(os.path.join(folder, "hub.log"), "w+")  # noqa: SIM115 - read back at the end
    hub = subprocess.Popen([*hub_command, "--socket", path], stdout=log, stderr=subprocess.STDOUT)
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    procs = [ctx.Process(target=steady_agent, args=(path, rank, ranks, 1 / rate, stop), daemon=True)
             for rank in range(ranks)]
    result: dict[str, Any] = {"hub_command": shlex.join(hub_command), "ranks": ranks, "steps_per_s_per_rank": rate,
                              "viewer": viewer}
    viewing = threading.Event()
    try:
        from gpumix.wire.paths import hub_answers

        wait_until(lambda: hub.poll() is not None or hub_answers(path), 60, what="the hub's socket")
        if hub.poll() is not None:
            raise RuntimeError("the hub exited")
        for proc in procs:
            proc.start()
        client = HubClient(path)
        wait_until(lambda: len([r for r in (client.snapshot() or {}).get("ranks") or [] if r.get("step")]) >= ranks, 60,
                   what=f"{ranks} ranks stepping")
        if viewer:
            threading.Thread(target=view_each_second, args=(path, viewing), daemon=True).start()
        time.sleep(warmup_s)
        meter = psutil.Process(hub.pid)
        woke0, cpu0, ns0, t0 = wakeups(hub.pid), sum(meter.cpu_times()[:2]), cpu_ns(hub.pid), time.monotonic()
        time.sleep(seconds)
        woke1, cpu1, ns1, t1 = wakeups(hub.pid), sum(meter.cpu_times()[:2]), cpu_ns(hub.pid), time.monotonic()
        snapshot = client.snapshot() or {}
        client.close()
        cpu_pct = 100.0 * (cpu1 - cpu0) / (t1 - t0)
        interval_s = float(snapshot.get("interval_s") or 1.0)
        result.update({
            "gpus": len(snapshot.get("gpus") or []), "ranks_seen": len(snapshot.get("ranks") or []),
            "seconds": round(t1 - t0, 3), "hub_cpu_s": round(cpu1 - cpu0, 4),
            "hub_cpu_pct_of_one_core": round(cpu_pct, 3), "interval_s": interval_s,
            "hub_cpu_pct_of_one_core_schedstat": round(100.0 * (ns1 - ns0) / 1e9 / (t1 - t0), 4),
            "hub_cpu_ms_per_tick": round(10.0 * cpu_pct * interval_s, 3),
            "hub_rss_mb": round(meter.memory_info().rss / 1e6, 1),
            "hub_wakeups_per_s": round((woke1 - woke0) / (t1 - t0), 1),
        })
    finally:
        viewing.set()
        stop_agents(stop, procs)
        if hub.poll() is None:
            hub.send_signal(signal.SIGTERM)
            try:
                hub.wait(30)  # a profiled hub writes its stats on the way out
            except subprocess.TimeoutExpired:
                hub.kill()
        log.seek(0)
        result["hub_log_tail"] = log.read()[-600:]
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
    return result


def tick_cpu_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per rank from the two extreme rank counts; per GPU from the hub with the fewest ranks."""
    measured = [run for run in runs if "hub_cpu_pct_of_one_core" in run]
    if not measured:
        return {}
    low, high = min(measured, key=lambda r: r["ranks"]), max(measured, key=lambda r: r["ranks"])
    per_rank = ((high["hub_cpu_pct_of_one_core"] - low["hub_cpu_pct_of_one_core"]) / (high["ranks"] - low["ranks"])
                if high["ranks"] > low["ranks"] else None)
    per_gpu = low["hub_cpu_pct_of_one_core"] / low["gpus"] if low["gpus"] and low["ranks"] == 0 else None
    rate = high["steps_per_s_per_rank"]
    summary: dict[str, Any] = {
        "cpu_pct_per_rank": round(per_rank, 4) if per_rank is not None else None,
        # % of a core is 10 ms of CPU per second: per rank over its steps per second
        "cpu_us_per_step": round(per_rank * 10_000.0 / rate, 1) if per_rank is not None and rate else None,
        "steps_per_s_per_rank": rate,
        "cpu_ms_per_tick_no_rank": low["hub_cpu_ms_per_tick"] if low["ranks"] == 0 else None,
        "cpu_pct_per_gpu_fixed_part_included": round(per_gpu, 4) if per_gpu is not None else None,
        "note": "per GPU = the hub with no rank over its GPUs: its fixed part is counted in; per rank at"
                " steps_per_s_per_rank (it scales with the step rate)",
    }
    if per_rank is not None and per_gpu is not None:
        summary["cpu_pct_for_10_gpus_10_ranks"] = round(10 * per_gpu + 10 * per_rank, 3)
        summary["goal_pct"] = GOAL_HUB_CPU_PCT
        summary["goal_met"] = summary["cpu_pct_for_10_gpus_10_ranks"] <= GOAL_HUB_CPU_PCT
    return summary


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
    parser.add_argument("--tick-cpu", action="store_true", help="(c) only: a real hub's CPU per tick with N ranks")
    parser.add_argument("--tick-ranks", default="0,10", help="with --tick-cpu: comma-separated rank counts (default 0,10)")
    parser.add_argument("--tick-rate", type=float, default=10.0, help="with --tick-cpu: steps/s per rank (default 10)")
    parser.add_argument("--tick-seconds", type=float, default=15.0, help="with --tick-cpu: measuring window (default 15)")
    parser.add_argument("--tick-warmup", type=float, default=3.0, help="with --tick-cpu: seconds before it (default 3)")
    parser.add_argument("--hub-command", default="gpumix hub --interval 1",
                        help="with --tick-cpu: the hub to run (--socket is added; default: gpumix hub --interval 1)")
    parser.add_argument("--socket", help="with --tick-cpu: a fixed socket path (default: a fresh one per run)")
    parser.add_argument("--tick-viewer", action="store_true",
                        help="with --tick-cpu: a dashboard's snapshot asked (\"view\") once a second meanwhile")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.tick_cpu:
        return main_tick_cpu(args)

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


def main_tick_cpu(args: argparse.Namespace) -> int:
    runs = []
    for ranks in (int(n) for n in args.tick_ranks.split(",")):
        try:
            runs.append(bench_tick_cpu(shlex.split(args.hub_command), ranks, args.tick_rate, args.tick_seconds,
                                       args.tick_warmup, args.socket, viewer=args.tick_viewer))
        except (RuntimeError, TimeoutError, AssertionError, OSError) as error:
            runs.append({"ranks": ranks, "error": f"{type(error).__name__}: {error}"})
    result = {
        "benchmark": "bench_hub --tick-cpu",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"hostname": platform.node(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "runs": runs, "summary": tick_cpu_summary(runs),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if all("error" not in run for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
