"""The demo job on a simulated machine: launched under the real supervisor, paced by the job model.

`DemoJob` runs `python -m gpumix.demo.launch` under `gpumix.run.supervisor.Supervisor`
(what `gpumix run` does), so re-planning the demo goes through the same restart
protocol as a real job. On the hub's side, each tick sets the simulated GPUs'
activity from what the ranks report (their share of the batch, their pids).
"""

from __future__ import annotations

import sys
import threading

from gpumix.demo.launch import SAMPLES_PER_RANK
from gpumix.hub.core import Hub
from gpumix.run.supervisor import Supervisor
from gpumix.sim.machine import GpuActivity, SimMachine, activity_for_step

JOB = "demo"


class DemoJob:
    def __init__(self, hub: Hub, machine: SimMachine, hub_address: str, rig_source: str) -> None:
        self.hub = hub
        self.machine = machine
        command = [sys.executable, "-m", "gpumix.demo.launch", "--rig", rig_source, "--hub", hub_address]
        self.supervisor = Supervisor(command, JOB, hub=hub_address, say=lambda _line: None, world_from_plan=True)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.hub.on_tick.append(self.update)
        self._thread = threading.Thread(target=self.supervisor.run, name="gpumix-demo-supervisor", daemon=True)
        self._thread.start()

    def update(self) -> None:
        """Make the simulated GPUs follow the ranks: busy while computing their share, idle while waiting."""
        snapshot = self.hub.snapshot()
        ranks = {r["gpu_uuid"]: r for r in (snapshot or {}).get("ranks", []) if r.get("job") == JOB and r.get("connected")}
        world = next((r.get("world_size") for r in ranks.values() if r.get("world_size")), len(self.machine.gpus))
        if len(ranks) < world:
            self.machine.synthetic_job = True  # before the ranks report (and while they restart)
            return
        self.machine.synthetic_job = False
        samples = [round(ranks[gpu.spec.uuid].get("samples") or SAMPLES_PER_RANK) if gpu.spec.uuid in ranks else 0
                   for gpu in self.machine.gpus]  # a GPU a plan left out runs no rank
        timing = self.machine.step_timing(samples)
        for index, gpu in enumerate(self.machine.gpus):
            rank = ranks.get(gpu.spec.uuid)
            if rank is None:
                self.machine.set_activity(index, GpuActivity())
                continue
            self.machine.set_activity(index, activity_for_step(timing, index, samples[index], world,
                                                               pids=[rank["pid"]] if rank.get("pid") else []))

    def stop(self) -> None:
        self.supervisor.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
