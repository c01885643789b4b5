"""Recording, replay and Prometheus: what they cost.

(a) Hub CPU with recording off and on: the simulated 10-GPU mixed rig with 10
    synthetic ranks (no processes), ticked back to back on an accelerated clock
    (each tick stands for 1 s). CPU is the whole process's (all threads: the
    recorder's writer included), per tick; at 1 tick/s, ms per tick / 10 is the
    % of one core.
(b) Size per GPU-hour: the file after (a) (pages + WAL, before any thinning),
    divided by the GPU-seconds recorded, times 3600.
(c) A 1-hour recording (3600 ticks of the same rig, synthetic clock), then
    `ReplaySource` load time (open + index + first snapshot decoded) in a fresh
    process, and process start -> first rendered snapshot of the replay app
    (Textual headless, 80x24).
(d) /metrics: median and p90 scrape time over HTTP on 127.0.0.1 with 10 GPUs
    and 10 ranks.

    .venv/bin/python benchmarks/bench_recording.py --out /tmp/recording.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpumix.cli.hardware import simulated_hardware  # noqa: E402
from gpumix.hub import Hub  # noqa: E402
from gpumix.record.prometheus import MetricsServer  # noqa: E402
from gpumix.record.recorder import Recorder  # noqa: E402
from gpumix.record.schema import file_bytes  # noqa: E402
from gpumix.sim.rig import load_builtin_rig  # noqa: E402
from tests.conftest import FixedHostSampler, ManualClock  # noqa: E402
from tests.recording_helpers import add_ranks, step_ranks  # noqa: E402

GPUS = 10


def make_hub() -> tuple[Hub, ManualClock, list]:
    clock = ManualClock()
    hardware = simulated_hardware(load_builtin_rig("mixed-10"), clock=clock, wall_clock=lambda: 1_764_500_000.0 + clock())
    hub = Hub(hardware, interval_s=1.0, host_sampler=FixedHostSampler(), clock=clock,
              wall_clock=lambda: 1_764_500_000.0 + clock(), hostname="rig01")
    hub.tick()
    clock.advance(1.0)
    return hub, clock, add_ranks(hub, GPUS)


def run_ticks(hub: Hub, clock: ManualClock, keys: list, ticks: int, recorder: Recorder | None = None) -> None:
    for tick in range(ticks):
        step_ranks(hub, keys, tick)
        hub.tick()
        clock.advance(1.0)
        if recorder is not None and tick % 100 == 99:
            recorder.flush()  # ticks come ~500x faster than real: let the writer keep up (no drops)


def cpu_per_tick(ticks: int, record_to: Path | None) -> dict[str, float]:
    hub, clock, keys = make_hub()
    run_ticks(hub, clock, keys, 20)  # warm-up
    recorder = Recorder(record_to).attach(hub) if record_to else None
    cpu0, wall0 = time.process_time(), time.perf_counter()
    run_ticks(hub, clock, keys, ticks, recorder)
    if recorder is not None:
        recorder.flush()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    result = {"ticks": ticks, "cpu_s": cpu, "wall_s": wall, "cpu_ms_per_tick": 1000 * cpu / ticks}
    if recorder is not None:
        result["file_bytes"] = file_bytes(recorder._conn, record_to)
        result["drops"] = recorder.drops
        result["snapshots"] = recorder.written
        recorder.close()
        result["file_bytes_closed"] = os.path.getsize(record_to)
    return result


def one_hour(path: Path) -> dict[str, float]:
    hub, clock, keys = make_hub()
    recorder = Recorder(path).attach(hub)
    start = time.perf_counter()
    run_ticks(hub, clock, keys, 3600, recorder)
    recorder.close()
    return {"ticks": 3600, "generate_s": time.perf_counter() - start, "file_bytes": os.path.getsize(path),
            "drops": recorder.drops, "snapshots": recorder.written}


LOAD_CODE = """
import time, sys
t0 = time.perf_counter()
from gpumix.record.replay import ReplaySource
s = ReplaySource(sys.argv[1]); s.snapshot()
print(time.perf_counter() - t0)
"""

RENDER_CODE = """
import asyncio, sys
from gpumix.record.replay import ReplaySource
from gpumix.tui.replay import ReplayApp
async def main():
    app = ReplayApp(ReplaySource(sys.argv[1]))
    async with app.run_test(size=(80, 24)) as pilot:
        while not app.renders:
            await pilot.pause(0.005)
        print("rendered", flush=True)
asyncio.run(main())
"""


def replay_open(path: Path, runs: int) -> dict[str, float]:
    loads, renders = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", LOAD_CODE, str(path)], capture_output=True, text=True, cwd=ROOT, check=True)
        loads.append(float(out.stdout.strip()))
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", RENDER_CODE, str(path)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        line = child.stdout.readline()
        renders.append(time.perf_counter() - start)
        assert line.strip() == "rendered", line
        child.wait(30)
    return {"runs": runs, "source_load_s_median": statistics.median(loads), "source_load_s_max": max(loads),
            "process_start_to_first_render_s_median": statistics.median(renders),
            "process_start_to_first_render_s_max": max(renders)}


def scrapes(count: int) -> dict[str, float]:
    hub, clock, keys = make_hub()
    run_ticks(hub, clock, keys, 12)
    server = MetricsServer(hub, "127.0.0.1", 0)
    times = []
    size = 0
    try:
        for _ in range(count):
            start = time.perf_counter()
            size = len(urllib.request.urlopen(server.url, timeout=5).read())
            times.append(time.perf_counter() - start)
    finally:
        server.stop()
    times.sort()
    return {"scrapes": count, "median_ms": 1000 * statistics.median(times), "p90_ms": 1000 * times[int(0.9 * count)],
            "bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=600, help="ticks per CPU run (each stands for 1 s)")
    parser.add_argument("--replay-runs", type=int, default=5)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--out", metavar="FILE")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        off = cpu_per_tick(args.ticks, None)
        on = cpu_per_tick(args.ticks, folder / "cpu.sqlite")
        off2 = cpu_per_tick(args.ticks, None)  # again: the first run warms caches
        on2 = cpu_per_tick(args.ticks, folder / "cpu2.sqlite")
        hour = one_hour(folder / "hour.sqlite")
        per_gpu_hour = hour["file_bytes"] / (hour["snapshots"] * GPUS) * 3600
        replay = replay_open(folder / "hour.sqlite", args.replay_runs)
    scrape = scrapes(args.scrapes)
    off_ms = min(off["cpu_ms_per_tick"], off2["cpu_ms_per_tick"])
    on_ms = min(on["cpu_ms_per_tick"], on2["cpu_ms_per_tick"])
    result = {
        "date": dt.date.today().isoformat(), "machine": platform.machine(), "cpus": os.cpu_count(),
        "python": platform.python_version(), "cpu_off": [off, off2], "cpu_on": [on, on2],
        "recording_cpu_ms_per_tick": on_ms - off_ms,
        "recording_core_pct_at_1s": (on_ms - off_ms) / 10,
        "bytes_per_gpu_hour": per_gpu_hour, "one_hour": hour, "replay": replay, "metrics": scrape,
    }
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    print(f"\nhub CPU per tick: off {off_ms:.2f} ms, on {on_ms:.2f} ms -> recording +{on_ms - off_ms:.2f} ms/tick"
          f" = {(on_ms - off_ms) / 10:.3f} % of a core at 1 tick/s")
    print(f"size: {per_gpu_hour / 1e6:.2f} MB per GPU-hour; 1 h of 10 GPUs + 10 ranks: {hour['file_bytes'] / 1e6:.1f} MB")
    print(f"replay of 1 h: load {replay['source_load_s_median']:.3f} s, process start -> first render"
          f" {replay['process_start_to_first_render_s_median']:.2f} s (median of {replay['runs']})")
    print(f"/metrics: median {scrape['median_ms']:.2f} ms, p90 {scrape['p90_ms']:.2f} ms, {scrape['bytes']} bytes")


if __name__ == "__main__":
    main()
