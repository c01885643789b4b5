"""The agent under hub faults, in real processes: absent, late, killed, frozen, flooded.

Training must never notice: no exception, no slower steps, bounded memory.
A small training script (TRAINER) runs N steps of time.sleep() with the agent, writes
its step count to a progress file as it goes and prints its step times and the sender's
counters; the hub runs in its own process (tests/hub_helper.py) so it can be killed and
frozen. "Training goes on" is checked as steps that ended while the hub was away, waited
for on the progress file; how long steps took is benchmarks/bench_agent_faults.py's
figure, not an assertion here (the box is shared).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumix.hub.client import HubClient
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
HUB_HELPER = Path(__file__).resolve().parent / "hub_helper.py"

# argv: socket path, steps, sleep per step (s), mode (agent | none | flood), close timeout (s),
# progress file (the steps ended so far, rewritten after each step)
TRAINER = r"""
import json, os, sys, time
import psutil
path, steps, pause, mode, close_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], float(sys.argv[5])
progress = os.open(sys.argv[6], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # before "go"
import gpumix.agent
if mode == "flood":
    agent = gpumix.agent.Agent(path, job="t", max_messages=64)
elif mode == "agent":
    agent = gpumix.agent.start(job="t", hub=path)
else:
    agent = None
process = psutil.Process()
rss_start = None
times, ends = [], []
print("go", flush=True)
for index in range(steps):
    if index == min(1000, steps // 10):
        rss_start = process.memory_info().rss
    began = time.perf_counter()
    if agent is None:
        if pause:
            time.sleep(pause)
    else:
        with agent.step(samples=8) as step:
            if pause:
                time.sleep(pause)
            step.loss = float(index)
    times.append(time.perf_counter() - began)
    ends.append(time.time())
    os.pwrite(progress, b"%12d" % (index + 1), 0)
result = {"times": times, "ends": ends, "rss_start": rss_start, "rss_end": process.memory_info().rss}
if agent is not None:
    sender = agent.sender
    result.update(dropped=agent.dropped, queued=agent.queued, maxlen=agent._ring.size)
    agent.close(close_s)
    result.update(sent=sender.sent, connects=sender.connects)
    gpumix.agent.stop()
print(json.dumps(result), flush=True)
"""


@pytest.fixture
def sock_path() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="gmx", dir="/tmp")  # short: Unix socket paths are limited
    yield os.path.join(folder, "hub.sock")
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:  # only the processes this test started, by their handle
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
            proc.kill()
        proc.wait(5)


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUMIX_", "CUDA_VISIBLE"))}
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", PYTHONUNBUFFERED="1", **extra)
    return env


def start_trainer(procs: list[subprocess.Popen[str]], path: str, steps: int, pause: float = 0.01,
                  mode: str = "agent", close_s: float = 2.0, **env: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", TRAINER, path, str(steps), str(pause), mode, str(close_s),
                             progress_path(path)],
                            cwd=ROOT, env=child_env(**env), stdout=subprocess.PIPE, text=True)
    procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "go"
    return proc


def progress_path(sock_path: str) -> str:
    return os.path.join(os.path.dirname(sock_path), "progress")


def steps_ended(sock_path: str) -> int:
    """How many steps the running trainer has ended (from its progress file)."""
    try:
        with open(progress_path(sock_path), "rb") as file:
            return int(file.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def wait_for_steps(sock_path: str, count: int, what: str, timeout_s: float = 60.0) -> int:
    """Wait until the trainer has ended `count` steps; a trainer stalled by the hub never gets there."""
    return wait_until(lambda: steps_ended(sock_path) >= count, timeout_s, what)


def finish_trainer(proc: subprocess.Popen[str], timeout_s: float = 20.0) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


def run_trainer(procs: list[subprocess.Popen[str]], path: str, steps: int, **kwargs: Any) -> dict[str, Any]:
    return finish_trainer(start_trainer(procs, path, steps, **kwargs))


def start_hub(procs: list[subprocess.Popen[str]], path: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(HUB_HELPER), path], cwd=ROOT, env=child_env(),
                            stdout=subprocess.PIPE, text=True)
    procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def rank0(path: str) -> dict[str, Any] | None:
    client = HubClient(path, timeout_s=2.0)
    try:
        snapshot = client.snapshot()
    finally:
        client.close()
    ranks = [r for r in (snapshot or {}).get("ranks", []) if r["rank"] == 0 and r["job"] == "t"]
    return ranks[0] if ranks else None


# -- (a) no hub at all -----------------------------------------------------------------------


@pytest.mark.slow
def test_hub_absent_training_unaffected(procs: list[subprocess.Popen[str]], sock_path: str) -> None:
    steps = 150
    baseline = run_trainer(procs, sock_path, steps, mode="none")
    disabled = run_trainer(procs, sock_path, steps, close_s=0.2, GPUMIX_DISABLE="1")
    absent = run_trainer(procs, sock_path, steps, close_s=0.2)
    assert len(absent["times"]) == steps
    assert absent["sent"] == 0 and absent["connects"] == 0 and absent["dropped"] == 0
    assert absent["queued"] == steps  # every step waits for a hub, none is built into a message
    assert len(baseline["times"]) == len(disabled["times"]) == steps
    assert "sent" not in disabled or disabled["connects"] == 0
    assert not os.path.exists(sock_path)


# -- (b) hub comes up after training started -------------------------------------------------


@pytest.mark.slow
def test_hub_started_mid_run(procs: list[subprocess.Popen[str]], sock_path: str) -> None:
    steps = 350
    trainer = start_trainer(procs, sock_path, steps)
    wait_for_steps(sock_path, 50, "50 steps without a hub")  # training runs with no hub at all
    start_hub(procs, sock_path)
    # the sender backs off 0.1, 0.2, 0.4, 0.8, 1.6 s...: it finds the hub mid-run
    assert wait_until(lambda: (r := rank0(sock_path)) and r["step"] is not None, timeout_s=30.0)
    mid = rank0(sock_path)
    result = finish_trainer(trainer)
    assert mid is not None and mid["step"] < steps - 1  # connected while training still ran
    final = rank0(sock_path)
    assert final is not None and final["step"] == steps - 1 and not final["connected"]
    assert final["loss_history"] == [float(i) for i in range(steps - 60, steps)]  # nothing lost
    assert result["connects"] == 1 and result["dropped"] == 0 and result["sent"] == steps


# -- (c) hub killed and restarted --------------------------------------------------------------


@pytest.mark.slow
def test_hub_killed_and_restarted(procs: list[subprocess.Popen[str]], sock_path: str) -> None:
    steps = 450
    hub = start_hub(procs, sock_path)
    trainer = start_trainer(procs, sock_path, steps)
    assert wait_until(lambda: (r := rank0(sock_path)) and r["step"] is not None and r["step"] >= 20, timeout_s=10.0)
    hub.kill()  # no cleanup: a stale socket file stays behind
    hub.wait(5)
    killed_at = time.time()
    assert os.path.exists(sock_path)
    # training goes on while the hub is gone: 30 more steps end before it comes back
    wait_for_steps(sock_path, steps_ended(sock_path) + 30, "30 steps while the hub is dead")
    start_hub(procs, sock_path)  # replaces the stale file
    restarted_at = time.time()
    assert wait_until(lambda: (r := rank0(sock_path)) and r["step"] is not None, timeout_s=5.0)
    result = finish_trainer(trainer)
    assert result["connects"] >= 2
    final = rank0(sock_path)
    assert final is not None and final["step"] == steps - 1 and not final["connected"]
    # the restarted hub has the steps that ended after it came up, in order, up to the last
    history = final["loss_history"]
    assert history == [float(i) for i in range(int(history[0]), steps)]
    first_after = sum(1 for end in result["ends"] if end < restarted_at)
    assert history[0] <= max(first_after, steps - 60)
    # the outage did not stop training (how long its steps took: benchmarks/bench_agent_faults.py)
    outage = [end for end in result["ends"] if killed_at <= end <= restarted_at]
    assert len(outage) >= 30


# -- (d) hub frozen (SIGSTOP) ---------------------------------------------------------------


@pytest.mark.slow
def test_hub_frozen_then_resumed(procs: list[subprocess.Popen[str]], sock_path: str) -> None:
    steps = 450
    hub = start_hub(procs, sock_path)
    trainer = start_trainer(procs, sock_path, steps)
    assert wait_until(lambda: (r := rank0(sock_path)) and r["step"] is not None and r["step"] >= 20, timeout_s=10.0)
    hub.send_signal(signal.SIGSTOP)
    try:
        frozen_from = steps_ended(sock_path)
        # a sender that blocked on the frozen hub's full socket would stall training here
        wait_for_steps(sock_path, frozen_from + 100, "100 steps while the hub is frozen")
    finally:
        hub.send_signal(signal.SIGCONT)
    assert steps_ended(sock_path) < steps, "training ended before the hub came back: make it longer"
    result = finish_trainer(trainer)
    final = rank0(sock_path)
    assert final is not None and final["step"] == steps - 1 and not final["connected"]
    assert final["loss_history"] == [float(i) for i in range(steps - 60, steps)]
    assert result["dropped"] == 0


# -- (e) flood with a small queue and no hub --------------------------------------------------


@pytest.mark.slow
def test_flood_small_queue_bounded(procs: list[subprocess.Popen[str]], sock_path: str) -> None:
    steps = 20_000
    result = run_trainer(procs, sock_path, steps, pause=0.0, mode="flood", close_s=0.2)
    assert result["maxlen"] == 64
    assert result["queued"] <= 64
    assert result["dropped"] > 0
    assert result["dropped"] == steps - result["queued"]  # nothing was sent, every overflow counted
    growth_mb = (result["rss_end"] - result["rss_start"]) / 2**20
    assert growth_mb < 20, growth_mb
