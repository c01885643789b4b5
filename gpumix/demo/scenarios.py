"""Demo scenarios: the simulated world shows one field finding on purpose, deterministically.

Each scenario replaces the demo job with the job (or process) the finding is about, on the rig's
GPUs: its ranks report through the hub's own ingest (parse_hello, parse_step) once per hub tick,
and the simulated GPUs show the matching NVML readings (utilisation, memory, process lists, PCIe).
Nothing is measured in wall time, so what the advisor sees does not depend on the load of the
machine running the demo. `start_scenario(hub, name)`; `gpumix-top --demo --scenario NAME`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpumix.hub.core import Hub
from gpumix.hub.ranks import parse_hello, parse_step
from gpumix.sim.machine import GpuActivity

GIB = 1024**3
DEMO_PID_BASE = 3_000_000  # rank "processes" of a scenario: above any real pid (pid_max is at most 2^22)
FIRST_STEPS = 12  # a full median window at once
GOOD_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"}
GRADIENT_BYTES = 4e8  # 100 M fp32 parameters


class ScenarioError(ValueError):
    """An unknown scenario, or a rig it does not fit; str() is the one line shown."""


@dataclass
class Rank:
    key: Any
    fields: Callable[[int], dict[str, Any]]  # step index -> the step's fields
    step: int = 0


@dataclass
class Scenario:
    name: str
    finding: str  # the finding id it shows
    hub: Hub
    ranks: list[Rank] = field(default_factory=list)

    def add_rank(self, rank: int, world: int, gpu: int, fields: Callable[[int], dict[str, Any]],
                 job: str | None = None, env: dict[str, str] | None = None, first_steps: int = FIRST_STEPS) -> None:
        uuid = self.hub.snapshot()["gpus"][gpu]["uuid"]
        key = self.hub.agent_hello(parse_hello({
            "rank": rank, "world_size": world, "job": job or f"scenario-{self.name}", "pid": DEMO_PID_BASE + gpu,
            "gpu_uuid": uuid, "nvml_index": gpu, "env": GOOD_ENV if env is None else env}))
        self.ranks.append(Rank(key, fields))
        for _ in range(first_steps):
            self.step_rank(self.ranks[-1])

    def step_rank(self, rank: Rank) -> None:
        self.hub.agent_step(rank.key, parse_step({"step": rank.step, **rank.fields(rank.step)}))
        rank.step += 1

    def tick(self) -> None:
        """One step per rank per hub tick: the ranks look alive, their figures do not move."""
        for rank in self.ranks:
            self.step_rank(rank)


def _gpus_of(hub: Hub, *models: str) -> list[int]:
    return [g["index"] for g in hub.snapshot()["gpus"] if any(m in g["name"] for m in models)]


def _busy(util_pct: float, mem_gib: float, pids: list[int], pcie_bytes_per_s: float = 0.0) -> GpuActivity:
    return GpuActivity(busy_fraction=util_pct / 100, util_pct=util_pct, mem_used_bytes=int(mem_gib * GIB),
                       pids=pids, pcie_rx_bytes_per_s=pcie_bytes_per_s, pcie_tx_bytes_per_s=pcie_bytes_per_s)


def _pick(hub: Hub, count: int, *models: str) -> list[int]:
    chosen = (_gpus_of(hub, *models) or [g["index"] for g in hub.snapshot()["gpus"]])[:count]
    if len(chosen) < count:
        raise ScenarioError(f"this rig has {len(chosen)} GPUs; the scenario needs {count}")
    return chosen


def _data_parallel(scenario: Scenario) -> None:
    """One process (the demo's own) on two GPUs, the first holding the gathered outputs."""
    first, second = _pick(scenario.hub, 2, "3090", "4090")
    machine = scenario.hub.hardware.machine
    machine.set_activity(first, _busy(62.0, 21.0, [os.getpid()]))
    machine.set_activity(second, _busy(38.0, 9.0, [os.getpid()]))


def _uneven_memory(scenario: Scenario) -> None:
    """A DDP job of four ranks at equal splits; the last one leaks (17 GiB against 10)."""
    gpus = _pick(scenario.hub, 4, "3090")
    machine = scenario.hub.hardware.machine
    for rank, gpu in enumerate(gpus):
        machine.set_activity(gpu, _busy(90.0, 17.0 if rank == 3 else 10.0, [DEMO_PID_BASE + gpu]))
        scenario.add_rank(rank, len(gpus), gpu, lambda step: {"step_time_s": 0.40, "comm_s": 0.05, "samples": 32,
                                                              "micro_batch": 32})


def _launch_bound(scenario: Scenario) -> None:
    """12 ms steps of 8 samples on a 4090: the GPU idles while Python launches kernels."""
    (gpu,) = _pick(scenario.hub, 1, "4090")
    scenario.hub.hardware.machine.set_activity(gpu, _busy(35.0, 6.0, [DEMO_PID_BASE + gpu]))
    scenario.add_rank(0, 1, gpu, lambda step: {
        "step_time_s": 0.012, "comm_s": 0.0, "data_wait_s": 0.0002, "samples": 8, "micro_batch": 8,
        "cpu_pct": 99.0, "mem_peak_bytes": 4 * GIB})


def _mixed_precision(scenario: Scenario) -> None:
    """Rank 0 trains in fp32; rank 1 in fp16 with a scale that halves every other step."""
    first, second = _pick(scenario.hub, 2, "3090", "4090")
    machine = scenario.hub.hardware.machine
    for gpu in (first, second):
        machine.set_activity(gpu, _busy(92.0, 14.0, [DEMO_PID_BASE + gpu]))
    scenario.add_rank(0, 2, first, lambda step: {"step_time_s": 0.5, "comm_s": 0.05, "samples": 32,
                                                  "amp_autocast": 0, "amp_dtype": "float32"})
    scenario.add_rank(1, 2, second, lambda step: {
        "step_time_s": 0.5, "comm_s": 0.05, "samples": 32, "amp_autocast": 1, "amp_dtype": "float16",
        "loss_scale": max(2.0 ** -20, 65536.0 / 2 ** (step // 2)), "amp_skipped_steps": (step + 1) // 2},
        first_steps=40)  # a window of skipped steps at once


def _cpu_forwarding(scenario: Scenario) -> None:
    """A DDP job on the rig's narrowest links: the ring all-reduce of 400 MB of gradients through host
    memory takes 2(R-1)/R x bytes over the slowest link (the world's physics), exposed on every rank."""
    snapshot = scenario.hub.snapshot()
    gpus = sorted(snapshot["gpus"], key=lambda g: g["pcie_link_bytes_per_s_max"] or 0.0)[:4]
    if len(gpus) < 2:
        raise ScenarioError("the cpu-forwarding scenario needs at least 2 GPUs")
    world = len(gpus)
    slowest = min(g["pcie_link_bytes_per_s_max"] or 1e9 for g in gpus)
    comm_s = 2 * (world - 1) / world * GRADIENT_BYTES / slowest
    compute_s = 0.25
    step_s = compute_s + comm_s
    machine = scenario.hub.hardware.machine
    for rank, gpu in enumerate(gpus):
        traffic = 2 * (world - 1) / world * GRADIENT_BYTES / step_s  # averaged over the step, as NVML counts
        machine.set_activity(gpu["index"], _busy(100 * compute_s / step_s, 10.0, [DEMO_PID_BASE + gpu["index"]],
                                                 traffic))
        scenario.add_rank(rank, world, gpu["index"], lambda step: {
            "step_time_s": step_s, "comm_s": comm_s, "data_wait_s": 0.0, "samples": 32,
            "gradient_bytes": GRADIENT_BYTES})


SCENARIOS: dict[str, tuple[str, Callable[[Scenario], None]]] = {
    "data-parallel": ("data-parallel", _data_parallel),
    "uneven-memory": ("uneven-memory", _uneven_memory),
    "launch-bound": ("launch-bound", _launch_bound),
    "mixed-precision": ("loss-scale-collapsing", _mixed_precision),
    "cpu-forwarding": ("cpu-forwarding", _cpu_forwarding),
}


def start_scenario(hub: Hub, name: str) -> Scenario:
    """Stop the synthetic job, set up the scenario's GPUs and ranks, and step them on every hub tick."""
    if name not in SCENARIOS:
        raise ScenarioError(f"unknown scenario {name!r:.40} (known: {', '.join(sorted(SCENARIOS))})")
    machine = hub.hardware.machine
    if machine is None:
        raise ScenarioError("scenarios run in the simulated world only (--demo or --sim)")
    machine.synthetic_job = False
    finding, setup = SCENARIOS[name]
    scenario = Scenario(name, finding, hub)
    setup(scenario)
    hub.on_tick.append(scenario.tick)
    hub.tick()
    return scenario
