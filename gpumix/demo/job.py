"""Launch and pace the demo job on a simulated machine.

The job model (gpumix.sim.job_model) decides each rank's compute time from
its card's speed, power cap and share of the batch; the ranks sleep that
long; the simulated GPUs show the matching utilization, power and PCIe.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from gpumix.demo.rank import run_rank
from gpumix.sim import job_model
from gpumix.sim.machine import SimMachine, activity_for_step

SAMPLES_PER_RANK = 64  # the equal split a user starts with


class DemoJob:
    def __init__(self, machine: SimMachine, hub_address: str, samples_per_rank: int = SAMPLES_PER_RANK) -> None:
        self.machine = machine
        self.hub_address = hub_address
        self.world = len(machine.gpus)
        self.samples = [samples_per_rank] * self.world
        context = multiprocessing.get_context("spawn")  # no fork of a threaded process
        self._pace = context.Array("d", self.world + 1, lock=False)
        self._barrier = context.Barrier(self.world)
        self._stop = context.Event()
        self._context = context
        self.processes: list[Any] = []

    def update(self) -> None:
        """Re-pace the ranks and the simulated GPUs (power caps may have changed)."""
        timing = job_model.step_timing(self.machine.rank_loads(self.samples))
        for rank in range(self.world):
            self._pace[rank] = timing.compute_s[rank]
        self._pace[self.world] = timing.allreduce_s
        pids = [process.pid for process in self.processes]
        for rank in range(self.world):
            activity = activity_for_step(timing, rank, self.samples[rank], self.world,
                                         pids=[pids[rank]] if rank < len(pids) and pids[rank] else [])
            self.machine.set_activity(rank, activity)

    def start(self) -> None:
        self.machine.synthetic_job = False
        self.update()
        for rank, gpu in enumerate(self.machine.rig.gpus):
            process = self._context.Process(
                target=run_rank, name=f"gpumix-demo-rank{rank}", daemon=True,
                args=(rank, self.world, gpu.uuid, self.hub_address, self.samples[rank], self._pace, self._barrier, self._stop),
            )
            process.start()
            self.processes.append(process)
        self.update()  # now with the ranks' pids on the GPUs

    def stop(self) -> None:
        self._stop.set()
        self._barrier.abort()
        for process in self.processes:
            process.join(timeout=3)
            if process.is_alive():
                process.terminate()
