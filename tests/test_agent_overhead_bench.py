"""benchmarks/bench_agent_overhead.py runs where the integrator measures it: one rank (a machine of one
GPU) or two, here as CPU processes over gloo, against a hub it starts; its JSON keeps every run's
seconds per step, the medians, each pair's overhead and the spread, and says that the agent sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2])
def test_paired_runs_on_cpu_processes_with_a_hub_it_starts(nproc: int, tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_agent_overhead.py"), "--nproc", str(nproc),
                           "--device", "cpu", "--pairs", "2", "--steps", "30", "--width", "64", "--batch", "8",
                           "--start-hub", "--out", str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["nproc"] == nproc and result["device"] == "cpu" and result["hub"].startswith("started")
    assert len(result["runs_without"]) == len(result["runs_with"]) == len(result["paired_overheads"]) == 2
    assert all(seconds > 0 for seconds in result["runs_without"] + result["runs_with"])
    spread = result["paired_overhead_spread"]
    assert spread["min"] <= result["paired_overhead_median"] <= spread["max"]
    assert spread["range"] == pytest.approx(spread["max"] - spread["min"])
    # each run with the agent connected to the hub and sent its steps (20 timed, 10 warm-up)
    assert result["agent_connects"] == [1, 1] and all(sent >= 30 for sent in result["agent_sent"])
