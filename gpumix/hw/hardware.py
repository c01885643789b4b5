"""The hardware a hub samples: an NVML backend (real, or fed by a simulated world) and what goes with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpumix.hw.nvml_backend import NvmlBackend


class Ticking(Protocol):
    """A simulated world the hub advances once per sampling round (gpumix.sim's machine)."""

    def tick(self) -> None: ...


@dataclass
class Hardware:
    backend: NvmlBackend
    source: str  # "nvml" or "sim:RIG"
    machine: Ticking | None = None  # the simulated world, when simulating
    power_budget_w: float | None = None
    power_layout: dict | None = None  # supplies and circuits, JSON form (gpumix.power.supplies.PowerLayout)
    rig_source: str | None = None  # the rig's name or file, for the demo job's launcher
