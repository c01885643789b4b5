"""The hub for weeks, compressed: a real `gpumix hub` process under honest agents, hostile frames,
job churn and idle connections, for N minutes. Reports its RSS, CPU, snapshot size, the latency of a
well-behaved client and the steps honest agents lost.

Who does what, all against one hub subprocess (Unix socket + TCP on loopback, the token required):
  - honest agents: A real gpumix.agent.Agent processes (jobs `honest-0..`), stepping at R steps/s for
    the whole run; each reports at exit how many steps it made, sent and dropped, and the hub's last
    step for it is read before it exits. A lost step = made - sent, or a final step the hub never saw;
  - job churn: J short jobs over the run (raw-protocol ranks: hello, 40 steps, bye), each with a new
    run id, so gone jobs pile up unless the hub forgets them;
  - hostile peers: random bytes, oversized and empty frames, bad JSON, wrong versions, absurd numbers,
    huge and markup-laden strings, hellos that claim a live honest rank, tokenless TCP, idle sockets;
  - a well-behaved client asks for a snapshot every 0.5 s and times the answer.

Goals (issue 10, for 30 minutes): RSS growth <= 20 MB, snapshot <= 1 MB, client p99 <= 100 ms, zero
steps lost by honest agents. The hub's RSS is sampled every 10 s and kept once a minute, and a
least-squares slope is fitted to the second half: the history ring fills during its first
`--history-minutes`, so with a short ring the second half's slope is the steady growth (a leak), apart
from the ring's fill.

    .venv/bin/python benchmarks/soak_hub.py --minutes 30 --out benchmarks/results/soak_hub_30min.json
    .venv/bin/python benchmarks/soak_hub.py --minutes 30 --history-minutes 1 \
        --out benchmarks/results/soak_hub_30min_history1.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
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

from gpumix.hub.client import HubClient
from gpumix.wire import protocol

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"rss_growth_mb": 20.0, "snapshot_bytes": 1_000_000, "client_p99_ms": 100.0, "lost_steps": 0}

HONEST_AGENT = r"""
import json, os, sys, time
import gpumix.agent
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
agent = gpumix.agent.start()
made = 0
next_at = time.monotonic()
end = next_at + seconds
while time.monotonic() < end:
    with agent.step(samples=32) as step:
        step.loss = 1.0 / (made + 1)
        made += 1
    next_at += 1.0 / rate
    time.sleep(max(0.0, next_at - time.monotonic()))
last_step = agent.steps
agent.close()
print(json.dumps({"made": made, "last_step": last_step, "sent": agent.sender.sent,
                  "dropped": agent.dropped, "connects": agent.sender.connects}), flush=True)
"""


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1)))))]


def slope_per_minute(samples: list[tuple[float, int]]) -> float | None:
    """Least-squares slope of (seconds, bytes) samples, in MB per minute; None below 3 samples."""
    if len(samples) < 3:
        return None
    mean_t = statistics.fmean(t for t, _ in samples)
    mean_b = statistics.fmean(b for _, b in samples)
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    if spread == 0:
        return None
    slope_b_per_s = sum((t - mean_t) * (b - mean_b) for t, b in samples) / spread
    return slope_b_per_s * 60 / 1e6


def per_minute(samples: list[tuple[float, int]]) -> list[dict[str, float]]:
    """The first sample of each whole minute, for the JSON (the slope uses every sample)."""
    kept: dict[int, tuple[float, int]] = {}
    for t, rss in samples:
        kept.setdefault(int(t // 60), (t, rss))
    return [{"t_s": round(t, 1), "rss_mb": round(rss / 1e6, 2)} for t, rss in kept.values()]


def frame(message: dict[str, Any]) -> bytes:
    return protocol.encode(message)


def send_raw(path: str, payload: bytes, hold_s: float = 0.0) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(path)
            sock.sendall(payload)
            if hold_s:
                time.sleep(hold_s)
            sock.recv(4096)
        except OSError:
            pass


def hostile_payload(rng: random.Random, honest_job: str) -> bytes:
    """One hostile connection's bytes: malformed frames, or a well-formed hello followed by nonsense."""
    kind = rng.randrange(9)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 2048))
    if kind == 1:
        return protocol.HEADER.pack(rng.choice([0, 10**9, 2**32 - 1])) + b"{}"
    if kind == 2:
        body = b'{"v": 1, "type": "hello", "role": "agent", "rank": '
        return protocol.HEADER.pack(len(body)) + body
    if kind == 3:
        return frame({"type": "hello", "role": "agent", "rank": 0}).replace(b'"v":1', b'"v":99')
    hello = {"type": "hello", "role": "agent", "rank": rng.randrange(4), "pid": rng.randrange(1, 2**22),
             "job": rng.choice(["[/x]", "\x1b]0;PWNED\x07", "x" * 256, honest_job, "hostile"]),
             "gpu_uuid": rng.choice(["[/x]", "\x1b[2J", None]), "hostname": "h" * 200,
             "env": {f"K{i}": "v" * 400 for i in range(rng.randrange(0, 80))}}
    if kind == 4:  # claims a live honest rank (job honest-0, rank 0)
        hello.update(job=honest_job, rank=0)
    steps = b""
    for step in range(rng.randrange(1, 30)):
        steps += frame({"type": "step", "step": step,
                        "step_time_s": rng.choice([1e-308, 0.1, 1e308, -1.0]),
                        "samples": rng.choice([1e308, 64, -5, 1e30]),
                        "comm_s": rng.choice([-1e308, 0.01, 1e300]), "loss": rng.choice([1.7e308, -1.7e308, 0.5]),
                        "mem_peak_bytes": rng.choice([2**62, 1e9])})
    if kind == 5:
        steps += frame({"type": "transport", "channels": [{"src": i, "dst": i + 1, "transport": "[b]SHM" * 10}
                                                           for i in range(rng.randrange(1, 5000))]})[:60_000]
    return frame(hello) + steps


def hostile_loop(path: str, tcp: tuple[str, int], stop: threading.Event, counts: dict[str, int],
                 seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        choice = rng.random()
        if choice < 0.1:  # tokenless and wrong-token TCP
            with socket.socket() as sock:
                sock.settimeout(2.0)
                try:
                    sock.connect(tcp)
                    sock.sendall(frame({"type": "hello", "role": "client", "token": rng.choice([None, "nope"])}))
                    sock.recv(4096)
                except OSError:
                    pass
            counts["tcp_bad_token"] += 1
        elif choice < 0.15:  # idle: connects and says nothing (the hello deadline must close it)
            threading.Thread(target=send_raw, args=(path, b"", 5.0), daemon=True).start()
            counts["idle"] += 1
        else:
            send_raw(path, hostile_payload(rng, "honest-0"))
            counts["hostile_frames"] += 1
        stop.wait(0.05)


def churn_loop(path: str, jobs: int, seconds: float, stop: threading.Event, counts: dict[str, int]) -> None:
    """`jobs` short jobs spread over the run, 4 ranks each, a new run id every time."""
    gap_s = seconds / max(1, jobs)
    for job in range(jobs):
        if stop.wait(gap_s):
            return
        sockets = []
        for rank in range(4):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
                sock.sendall(frame({"type": "hello", "role": "agent", "rank": rank, "world_size": 4,
                                    "pid": 10_000_000 + job * 4 + rank, "job": f"churn-{job}",
                                    "run_id": f"churn-run-{job}"}))
                sockets.append(sock)
            except OSError:
                sock.close()
        for step in range(40):
            for sock in sockets:
                try:
                    sock.sendall(frame({"type": "step", "step": step, "step_time_s": 0.05, "samples": 64}))
                except OSError:
                    pass
        for sock in sockets:
            try:
                sock.sendall(frame({"type": "bye"}))
            except OSError:
                pass
            sock.close()
        counts["churn_jobs"] += 1


def client_loop(path: str, stop: threading.Event, latencies_s: list[float], sizes: list[int],
                failures: list[str]) -> None:
    client = HubClient(path, timeout_s=5.0)
    while not stop.is_set():
        start = time.perf_counter()
        snapshot = client.snapshot()
        elapsed = time.perf_counter() - start
        if snapshot is None:
            failures.append(client.last_error or "no snapshot")
        else:
            latencies_s.append(elapsed)
            sizes.append(len(protocol.encode({"type": "snapshot", "snapshot": snapshot})))
        stop.wait(0.5)
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--honest-agents", type=int, default=4)
    parser.add_argument("--step-rate", type=float, default=10.0, help="honest agents' steps per second")
    parser.add_argument("--churn-jobs", type=int, default=100)
    parser.add_argument("--hostile-threads", type=int, default=2)
    parser.add_argument("--retention-minutes", type=float, default=None,
                        help="the hub's retention of gone ranks (default: the hub's own)")
    parser.add_argument("--history-minutes", type=float, default=None,
                        help="the hub's history ring (default: the hub's own, 60); a short ring fills early, so "
                             "the second half's RSS slope shows a leak apart from the ring's fill")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    seconds = args.minutes * 60
    tmp = Path(tempfile.mkdtemp(prefix="gpumix-soak-"))
    path = str(tmp / "hub.sock")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp), "XDG_STATE_HOME": str(tmp), "XDG_RUNTIME_DIR": str(tmp)}
    hub_cmd = [sys.executable, "-m", "gpumix.cli.main", "hub", "--sim", "mixed-10", "--socket", path,
               "--tcp", "127.0.0.1:0"]
    if args.retention_minutes is not None:
        hub_cmd += ["--retention-minutes", str(args.retention_minutes)]
    if args.history_minutes is not None:
        hub_cmd += ["--history-minutes", str(args.history_minutes)]
    hub = subprocess.Popen(hub_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    banner = hub.stdout.readline()
    port = int(banner.split("tcp://127.0.0.1:")[1].split()[0].rstrip(";,)"))
    proc = psutil.Process(hub.pid)
    time.sleep(2.0)
    rss_start = proc.memory_info().rss
    cpu_start = proc.cpu_times()
    wall_start = time.monotonic()

    stop = threading.Event()
    counts = {"hostile_frames": 0, "tcp_bad_token": 0, "idle": 0, "churn_jobs": 0}
    latencies_s: list[float] = []
    sizes: list[int] = []
    failures: list[str] = []
    honest = [subprocess.Popen([sys.executable, "-c", HONEST_AGENT, str(args.step_rate), str(seconds)],
                               stdout=subprocess.PIPE, text=True,
                               env={**env, "GPUMIX_HUB": path, "GPUMIX_JOB": f"honest-{i}", "RANK": "0",
                                    "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
              for i in range(args.honest_agents)]
    threads = [threading.Thread(target=client_loop, args=(path, stop, latencies_s, sizes, failures), daemon=True),
               threading.Thread(target=churn_loop, args=(path, args.churn_jobs, seconds, stop, counts), daemon=True)]
    threads += [threading.Thread(target=hostile_loop, args=(path, ("127.0.0.1", port), stop, counts, seed),
                                 daemon=True) for seed in range(args.hostile_threads)]
    for thread in threads:
        thread.start()
    rss_samples: list[tuple[float, int]] = []  # (seconds since start, bytes)
    honest_pids = {agent.pid: i for i, agent in enumerate(honest)}
    last_hub_steps: dict[int, int | None] = {}  # honest agent -> the last step the hub shows for its process

    def read_honest_steps() -> int:
        snapshot = watcher.snapshot() or {}
        for rank in snapshot.get("ranks", []):
            if rank.get("pid") in honest_pids:  # by pid: a hostile hello may claim the same job and rank
                last_hub_steps[honest_pids[rank["pid"]]] = rank.get("step")
        return len(snapshot.get("ranks", []))

    watcher = HubClient(path, timeout_s=5.0)
    while time.monotonic() - wall_start < seconds:
        time.sleep(min(10.0, max(0.1, seconds - (time.monotonic() - wall_start))))
        rss_samples.append((time.monotonic() - wall_start, proc.memory_info().rss))
        read_honest_steps()
    final_ranks = read_honest_steps()
    # Hostile traffic stops before the honest agents' last steps are counted: a hostile hello for
    # (honest-0, rank 0) after that agent exited is, to the hub, its restart, and takes over its row
    # (as a relaunched rank must); the count would then miss the last steps the hub did receive.
    stop.set()
    for thread in threads:
        thread.join(10)
    results = [json.loads(p.communicate(timeout=60)[0].strip().splitlines()[-1]) for p in honest]
    time.sleep(2.0)
    read_honest_steps()
    cpu_end = proc.cpu_times()
    wall_s = time.monotonic() - wall_start
    rss_end = proc.memory_info().rss
    hub.terminate()
    hub_stderr = hub.communicate(timeout=30)[1]
    watcher.close()

    lost = 0
    honest_rows = []
    for i, result in enumerate(results):
        seen = last_hub_steps.get(i)
        # the agent reports step k when step k+1 ends; at close it flushes the last one
        missing_at_hub = 0 if seen is not None and seen >= result["last_step"] - 1 else 1
        lost_here = result["made"] - result["sent"] + result["dropped"] + missing_at_hub
        lost += max(0, lost_here)
        honest_rows.append({**result, "hub_last_step": seen})
    second_half = [(t, rss) for t, rss in rss_samples if t >= seconds / 2]
    second_half_slope = slope_per_minute(second_half)
    cpu_s = (cpu_end.user + cpu_end.system) - (cpu_start.user + cpu_start.system)
    report = {
        "benchmark": "soak_hub",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "minutes": args.minutes,
        "counts": counts,
        "hub": {"rss_start_mb": round(rss_start / 1e6, 1), "rss_end_mb": round(rss_end / 1e6, 1),
                "rss_max_mb": round(max([rss for _, rss in rss_samples] + [rss_end]) / 1e6, 1),
                "rss_growth_mb": round((rss_end - rss_start) / 1e6, 1),
                "history_minutes": args.history_minutes if args.history_minutes is not None else 60.0,
                "rss_slope_second_half_mb_per_min": None if second_half_slope is None else round(second_half_slope, 4),
                "rss_second_half_growth_mb": None if second_half_slope is None else round(
                    second_half_slope * (rss_samples[-1][0] - second_half[0][0]) / 60, 2),
                "rss_per_minute": per_minute([(0.0, rss_start), *rss_samples]),
                "cpu_pct_of_core": round(100 * cpu_s / wall_s, 2), "ranks_in_view_at_end": final_ranks,
                "stderr_bytes": len(hub_stderr), "stderr_tail": hub_stderr[-600:]},
        "snapshot_bytes": {"median": int(statistics.median(sizes)) if sizes else None,
                           "max": max(sizes) if sizes else None},
        "client": {"requests": len(latencies_s), "failures": len(failures), "first_failures": failures[:3],
                   "p50_ms": round(1000 * statistics.median(latencies_s), 2) if latencies_s else None,
                   "p99_ms": round(1000 * percentile(latencies_s, 99), 2) if latencies_s else None,
                   "max_ms": round(1000 * max(latencies_s), 2) if latencies_s else None},
        "honest_agents": honest_rows,
        "lost_steps": lost,
        "goals": GOALS,
    }
    report["met"] = {
        "rss_growth": report["hub"]["rss_growth_mb"] <= GOALS["rss_growth_mb"],
        "snapshot": (report["snapshot_bytes"]["max"] or 0) <= GOALS["snapshot_bytes"],
        "client_p99": (report["client"]["p99_ms"] or 1e9) <= GOALS["client_p99_ms"] and not failures,
        "lost_steps": lost == 0,
    }
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
