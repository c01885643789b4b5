"""Shared by the recording tests and benchmark: synthetic training ranks on a hub, no processes."""

from __future__ import annotations

from typing import Any

from gpumix.hub import Hub
from gpumix.hub.ranks import parse_hello, parse_step


def add_ranks(hub: Hub, count: int = 10, job: str = "train") -> list[Any]:
    """One rank per GPU (rank 0 on GPU 0 ...), compute slower on the first GPUs (a straggler)."""
    gpus = hub.snapshot()["gpus"]
    keys = []
    for rank in range(count):
        gpu = gpus[rank % len(gpus)]
        keys.append(hub.agent_hello(parse_hello({"rank": rank, "world_size": count, "job": job, "pid": 1000 + rank,
                                                 "gpu_uuid": gpu["uuid"]})))
    return keys


def step_ranks(hub: Hub, keys: list[Any], step: int) -> None:
    for rank, key in enumerate(keys):
        compute_s = 0.40 if rank == 0 else 0.10 + 0.01 * rank
        hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.5, "samples": 32, "comm_s": 0.5 - compute_s,
                                        "data_wait_s": 0.01, "loss": 2.0 / (1 + step), "mem_peak_bytes": 8 * 1024**3}))
