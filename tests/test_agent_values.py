"""numpy and torch values handed to the agent reach a real hub as plain numbers.

A training script runs in its own process with real numpy scalars and torch tensors for the
step's fields; the hub is real and served on a Unix socket. Before the fix every step carrying
one was refused by the hub (JSON turned np.int64(64) into the string "64") and the agent
reconnected on each step; the rank showed nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumix.hub import Hub
from gpumix.hub.server import HubServer

ROOT = Path(__file__).resolve().parent.parent
STEPS = 30

# argv: socket path, steps, kind (good | bad)
TRAINER = r"""
import json, sys, time
import numpy as np
import torch
import gpumix.agent
path, steps, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
agent = gpumix.agent.Agent(path, job="values")
agent.micro_batch = np.int64(16)
agent.accumulation_steps = torch.tensor(4)
agent.gradient_bytes = np.float32(4096.0)
for index in range(steps):
    if kind == "good":
        with agent.step(samples=np.int64(64), tokens=torch.tensor(1000)) as step:
            time.sleep(0.005)
            step.loss = np.float32(index + 0.5)
            step.lr = torch.tensor(2.0 ** -(index % 8))  # exact in float32
            step.forward_s = np.float64(0.002)
            step.optimizer_s = torch.tensor([0.25])  # one element: fine
    else:  # no numbers: each field is left out, with one warning each; the step still goes
        with agent.step(samples="64", tokens=[1000, 2000]) as step:
            time.sleep(0.005)
            step.loss = float(index)
            step.lr = torch.tensor([0.1, 0.2])
            step.forward_s = np.array([0.1, 0.2])
agent.close(5.0)
print(json.dumps({"connects": agent.sender.connects, "sent": agent.sender.sent,
                  "dropped": agent.sender.dropped}), flush=True)
"""


@pytest.fixture
def hub_path(demo_hardware) -> Iterator[tuple[Hub, str]]:
    hub = Hub(demo_hardware)
    hub.tick()
    folder = tempfile.mkdtemp(prefix="gmxv", dir="/tmp")  # short: Unix socket paths are limited
    path = os.path.join(folder, "hub.sock")
    server = HubServer(hub, path)
    server.start()
    yield hub, path
    server.stop()
    os.rmdir(folder)


def train(path: str, kind: str) -> tuple[dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUMIX_", "CUDA_VISIBLE"))}
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-c", TRAINER, path, str(STEPS), kind], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def the_rank(hub: Hub) -> dict[str, Any]:
    (rank,) = [r for r in hub.snapshot()["ranks"] if r["job"] == "values"]
    return rank


def test_numpy_and_torch_values_arrive_as_numbers(hub_path) -> None:
    hub, path = hub_path
    counters, stderr = train(path, "good")
    assert counters == {"connects": 1, "sent": STEPS, "dropped": 0}, stderr  # one connection: no step refused
    assert "gpumix agent" not in stderr  # every value was a number: nothing to warn about
    rank = the_rank(hub)
    assert rank["step"] == STEPS - 1 and not rank["connected"]
    assert rank["loss_history"] == [index + 0.5 for index in range(STEPS)]
    assert rank["loss"] == STEPS - 0.5 and rank["lr"] == 2.0 ** -((STEPS - 1) % 8)
    assert rank["samples"] == 64 and rank["tokens_per_s"] == pytest.approx(rank["samples_per_s"] * 1000 / 64)
    assert rank["forward_s"] == 0.002 and rank["optimizer_s"] == 0.25
    assert (rank["micro_batch"], rank["accumulation_steps"], rank["gradient_bytes"]) == (16, 4, 4096)


def test_values_that_are_no_numbers_are_left_out_with_one_warning_each(hub_path) -> None:
    hub, path = hub_path
    counters, stderr = train(path, "bad")
    assert counters == {"connects": 1, "sent": STEPS, "dropped": 0}, stderr
    rank = the_rank(hub)
    assert rank["step"] == STEPS - 1 and rank["loss_history"] == [float(i) for i in range(STEPS)]
    assert rank["samples"] is None and rank["tokens_per_s"] is None and rank["lr"] is None
    assert rank["forward_s"] is None and rank["step_time_s"] > 0
    warnings = [line for line in stderr.splitlines() if "gpumix agent:" in line]
    for field, what in (("samples", "str"), ("tokens", "list"), ("lr", "a tensor of 2 elements"),
                        ("forward_s", "an array of 2 elements")):
        named = [line for line in warnings if line.startswith(f"gpumix agent: {field} was given")]
        assert len(named) == 1 and what in named[0], (field, warnings)
    assert len(warnings) == 4, warnings
