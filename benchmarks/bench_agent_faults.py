"""Step times of a training loop while the hub is absent, frozen or flooded: the figures
tests/test_agent_faults.py no longer asserts (a shared box makes timings flaky as tests).

    .venv/bin/python benchmarks/bench_agent_faults.py --out benchmarks/results/agent_faults_DATE.json

Runs the test's trainer (10 ms of time.sleep() per step) in real processes: without the agent,
with GPUMIX_DISABLE=1, with no hub, with a hub that is SIGSTOPped for `--freeze` seconds, and
20 000 empty steps flooding a 64-message queue. Reports median and max step times in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_agent_faults import (  # noqa: E402  (the repository root is on sys.path first)
    finish_trainer,
    run_trainer,
    start_hub,
    start_trainer,
    steps_ended,
    wait_for_steps,
)


def _ms(times: list[float]) -> dict[str, float]:
    return {"median_ms": statistics.median(times) * 1e3, "max_ms": max(times) * 1e3, "steps": len(times)}


def measure(steps: int, freeze_s: float) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="gmxb", dir="/tmp")  # short: Unix socket paths are limited
    sock = os.path.join(folder, "hub.sock")
    procs: list[subprocess.Popen[str]] = []
    try:
        result: dict[str, Any] = {
            "no_agent": _ms(run_trainer(procs, sock, steps, mode="none")["times"]),
            "disabled": _ms(run_trainer(procs, sock, steps, close_s=0.2, GPUMIX_DISABLE="1")["times"]),
            "hub_absent": _ms(run_trainer(procs, sock, steps, close_s=0.2)["times"]),
        }
        hub = start_hub(procs, sock)
        trainer = start_trainer(procs, sock, steps + int(freeze_s * 200))
        wait_for_steps(sock, 20, "20 steps before the freeze")
        stopped_at = time.time()
        hub.send_signal(signal.SIGSTOP)
        try:
            deadline = time.monotonic() + freeze_s
            while time.monotonic() < deadline and steps_ended(sock) < steps:
                time.sleep(0.05)
        finally:
            hub.send_signal(signal.SIGCONT)
        resumed_at = time.time()
        run = finish_trainer(trainer, timeout_s=120)
        pairs = list(zip(run["times"], run["ends"], strict=True))
        result["hub_live"] = _ms([t for t, end in pairs if end < stopped_at])
        result["hub_frozen"] = _ms([t for t, end in pairs if stopped_at <= end <= resumed_at])
        flood = run_trainer(procs, sock + ".none", 20_000, pause=0.0, mode="flood", close_s=0.2)
        result["flood_64_queue"] = {**_ms(flood["times"]), "dropped": flood["dropped"]}
        return result
    finally:
        for proc in procs:  # only what this benchmark started, by handle
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait(5)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--freeze", type=float, default=2.0, help="seconds the hub stays SIGSTOPped")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = {
        "benchmark": "agent_faults", "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg": list(os.getloadavg())},
        "step_sleep_ms": 10.0, **measure(args.steps, args.freeze),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
