"""The hub's CPU per step of a rank, in process: what one agent write costs the hub once read (issue 13).

A real Agent (no hub) runs STEPS_PER_WRITE steps as bench_hub.py's ranks do (samples=32, a loss), and its
sender's bytes for them are what the hub reads: one columnar frame where the tree has it
(agent/sender.py encode_batch), else one message per step. Then for RANKS ranks of a real Hub on the
simulated 10-GPU rig, each write is fed through the hub's own read path (FrameCutter, handle_frames:
decode, checks, Hub.agent_steps), WRITES times; the figure is the thread's CPU time (time.thread_time)
per step, the best of --repeats, and the functions called per step (cProfile's call counts: deterministic).
The merge of the rank rows (once a tick) is timed apart: per rank and tick.

Run one tree against another, alternated (benchmarks/tree_at.sh lays a commit out for PYTHONPATH):

    .venv/bin/python benchmarks/bench_hub_steps.py --out after.json
    PYTHONPATH=/tmp/tree_before .venv/bin/python benchmarks/bench_hub_steps.py --out before.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import sys
import time
from pathlib import Path
from typing import Any

STEPS_PER_WRITE = 10  # 10 steps/s at the 1 s send period: bench_hub.py --tick-cpu's ranks
RANKS = 10


def agent_write() -> tuple[bytes, str]:
    """The bytes a rank's agent writes for STEPS_PER_WRITE steps, and how they were framed."""
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(RANKS), GPUMIX_GPU_UUID="")
    from gpumix.agent import Agent
    from gpumix.agent import sender as sender_module
    from gpumix.wire import protocol

    agent = Agent("/nonexistent/gpumix-bench.sock", job="bench-steps")
    for _ in range(STEPS_PER_WRITE + 1):  # the last one waits for the next (annotate_last)
        with agent.step(samples=32) as step:
            time.sleep(0.001)
            step.loss = 1.0
    messages = agent._collect(False, STEPS_PER_WRITE)
    agent.close(0.1)
    encode = getattr(sender_module, "encode_batch", None)
    if encode is not None:
        return encode(messages, True), "columnar frame"
    return b"".join(protocol.encode(message) for message in messages), "one message per step"


def make_hub(world_clock: Any = None) -> Any:
    """A hub over the simulated mixed-10, its world (the machine and its NVML's slow readings) on WORLD_CLOCK
    (default: the monotonic clock)."""
    from gpumix.cli.hardware import simulated_hardware
    from gpumix.hub import Hub
    from gpumix.sim.rig import load_builtin_rig

    rig = load_builtin_rig("mixed-10")
    hub = Hub(simulated_hardware(rig) if world_clock is None else simulated_hardware(rig, clock=world_clock))
    hub.tick()
    return hub


def hello(rank: int) -> dict[str, Any]:
    return {"rank": rank, "world_size": RANKS, "local_rank": 0, "pid": 1000 + rank, "hostname": "bench",
            "gpu_uuid": None, "nvml_index": rank, "job": "bench-steps", "run_id": None, "env": {}, "versions": {}}


def feed(hub: Any, keys: list[Any], data: bytes, writes: int) -> None:
    from gpumix.hub.agent_stream import FrameCutter, handle_frames

    cutters = [FrameCutter() for _ in keys]
    for _ in range(writes):
        for key, cutter in zip(keys, cutters, strict=True):
            handle_frames(hub, key, cutter.frames(data))


def measure(data: bytes, writes: int, repeats: int) -> dict[str, Any]:
    hub = make_hub()
    keys = [hub.agent_hello(hello(rank)) for rank in range(RANKS)]
    feed(hub, keys, data, 20)  # warm: the deques full, the caches made
    steps = writes * RANKS * STEPS_PER_WRITE
    per_step = []
    for _ in range(repeats):
        started = time.thread_time()
        feed(hub, keys, data, writes)
        per_step.append((time.thread_time() - started) / steps * 1e6)
    merges = []
    for _ in range(repeats):
        started = time.thread_time()
        for _ in range(50):
            hub._ranks_changed = True
            hub.snapshot()
        merges.append((time.thread_time() - started) / 50 / RANKS * 1e6)
    profile = cProfile.Profile()
    profile.enable()
    feed(hub, keys, data, 10)
    profile.disable()
    stats = pstats.Stats(profile)
    profiled_steps = 10 * RANKS * STEPS_PER_WRITE
    calls = {f"{Path(file).name}:{name}": round(count / profiled_steps, 3)
             for (file, _, name), (_, count, *_rest) in stats.stats.items()}  # type: ignore[attr-defined]
    return {"hub_cpu_us_per_step_best": round(min(per_step), 2), "hub_cpu_us_per_step_all": [round(x, 2) for x in per_step],
            "merge_us_per_rank_per_tick_best": round(min(merges), 1),
            "merge_us_per_rank_per_tick_all": [round(x, 1) for x in merges],
            "calls_per_step_total": round(sum(calls.values()), 2),
            "calls_per_step": dict(sorted(calls.items(), key=lambda item: -item[1])[:25])}


def machine() -> dict[str, Any]:
    """The machine a result was measured on (shared with the hub-tick benchmarks that import this one)."""
    return {"hostname": platform.node(), "cores": os.cpu_count(), "python": platform.python_version(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def command() -> str:
    return " ".join([Path(sys.executable).name, *sys.argv])


def report(result: dict[str, Any], out: Path | None) -> int:
    """The result printed as JSON, and written to `out` when given."""
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        out.write_text(text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=200, help="writes per rank per repeat (default 200)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    data, framing = agent_write()
    import gpumix

    result = {
        "benchmark": "bench_hub_steps", "gpumix_from": str(Path(gpumix.__file__).parent),
        "framing": framing, "bytes_per_write": len(data), "steps_per_write": STEPS_PER_WRITE, "ranks": RANKS,
        "machine": machine(), "command": command(),
        **measure(data, args.writes, args.repeats),
    }
    return report(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
