"""One demo rank: paces itself like its simulated GPU and reports through the real agent.

Each step: a short data wait (and the world's seeded loader stalls), 'compute'
for as long as this card needs for its share of the batch (the world's mean,
times its seeded per-step noise), then a barrier with every other rank followed by the
all-reduce time through host memory. Fast ranks wait at the barrier, as a
4090 waits in NCCL's all-reduce for a 3060: that wait is communication time.
A restart stops every rank after the same step (the barrier keeps them in
step), checkpoints the step count, and the relaunch continues from it.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

from gpumix.sim.world import GRADIENT_BYTES, jitter
from gpumix.wire.plan_file import RankShare

DATA_WAIT_S = 0.004


def demo_loss(step: int, noise: random.Random) -> float:
    return 2.4 * math.exp(-step / 400) + 0.3 + noise.uniform(-0.03, 0.03)


def run_rank(rank: int, world: int, gpu: int, gpu_uuid: str, hub: str, share: RankShare, pace: Any, barrier: Any,
             stop: Any, seed: int = 0) -> None:
    """`pace[gpu]` = compute seconds of this rank's step on its GPU, `pace[-1]` = the all-reduce seconds
    the step waits for."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), GPUMIX_GPU_UUID=gpu_uuid)
    import gpumix.agent

    agent = gpumix.agent.start(job=os.environ.get("GPUMIX_JOB") or "demo", hub=hub)
    agent.micro_batch, agent.accumulation_steps = share.micro_batch, share.accumulation_steps
    agent.gradient_bytes = GRADIENT_BYTES
    folder = os.environ.get("GPUMIX_CONTROL_DIR")
    if folder and rank == 0:
        agent.on_checkpoint(lambda steps: (Path(folder) / "demo-checkpoint.json").write_text(json.dumps({"steps": steps})))
    noise = random.Random(rank)
    step = agent.resume_step
    try:
        while not stop.is_set():
            factor, stall_s = jitter(seed, gpu, step)
            time.sleep(DATA_WAIT_S + stall_s)
            with agent.step(samples=share.samples) as record:
                time.sleep(pace[gpu] * factor)
                comm_start = time.perf_counter()
                barrier.wait(timeout=30)
                time.sleep(pace[len(pace) - 1])
                record.comm_s = time.perf_counter() - comm_start
                record.loss = demo_loss(step, noise)
                record.lr = 0.1 * min(1.0, (step + 1) / 100)
            step += 1
            if agent.restart_point(step):
                break
    except Exception:  # a broken barrier (another rank stopped): end quietly
        pass
    finally:
        agent.close(timeout_s=1.0)
