"""A hub on the demo rig with a ten-rank job whose 3060s straggle, for the layout and SVG tests:
every screen (ranks, tiers, the split dialog) has something to show, and nothing moves by itself."""

from __future__ import annotations

from typing import Any

from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.hub.ranks import parse_hello, parse_step
from gpumix.sim.rig import load_builtin_rig
from tests.conftest import ManualClock, ticked_hub

GIB = 1024**3
COMPUTE_S = [0.40, 0.40, 0.40, 0.20, 0.20, 0.20, 0.20, 0.12, 0.12, 0.12]  # 3060s, 3090s, 4090s
STEP_S = 0.5


def job_hub(ticks: int = 30, steps: int = 20, job: str = "train") -> Hub:
    """The demo rig sampled `ticks` times on a manual clock, with a job of 10 ranks (one per GPU)
    that reported `steps` steps each: fixed numbers, so two renders draw the same screen."""
    clock = ManualClock()
    hardware = simulated_hardware(load_builtin_rig("mixed-10"), clock=clock,
                                  wall_clock=lambda: 1_764_500_000.0 + clock())
    hub = ticked_hub(hardware, clock, ticks=ticks)
    uuids = [gpu["uuid"] for gpu in hub.snapshot()["gpus"]]
    for rank, compute_s in enumerate(COMPUTE_S):
        key = hub.agent_hello(parse_hello({"rank": rank, "world_size": len(COMPUTE_S), "job": job, "pid": 6000 + rank,
                                           "gpu_uuid": uuids[rank]}))
        for step in range(steps):
            hub.agent_step(key, parse_step(step_fields(step, compute_s)))
    return hub


def step_fields(step: int, compute_s: float) -> dict[str, Any]:
    return {"step": step, "step_time_s": STEP_S, "samples": 32, "comm_s": STEP_S - compute_s, "data_wait_s": 0.0,
            "loss": 2.0 - step * 0.05 + (step % 3) * 0.01, "mem_peak_bytes": 9.5 * GIB, "cpu_pct": 98.0,
            "gradient_bytes": 400 * 1024**2}
