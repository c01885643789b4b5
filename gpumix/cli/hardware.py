"""Choose the hardware: real GPUs through NVML, or a simulated rig (the one place, with the demo,
where the commands reach into the simulated world).

The simulated machine and the power layouts are imported only when a rig is asked for: the
one-shot commands on real GPUs (`gpumix-top --once`, `gpumix doctor`) do not pay for them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpumix.hw.hardware import Hardware
from gpumix.hw.nvml_backend import NvmlBackend
from gpumix.sim.rig_fields import RigError

if TYPE_CHECKING:
    from gpumix.sim.rig import Rig

# RigError is re-exported from the light rig_fields (math, re); the rig reader (gpu models, tomllib,
# importlib.resources) loads only when a rig is asked for: not on real GPUs (issue 13)

__all__ = ["Hardware", "RigError", "is_builtin_rig", "open_hardware", "simulated_hardware"]


def open_hardware(
    demo: bool = False,
    sim_file: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> Hardware:
    """Raises NoDriverError (no NVIDIA driver) or RigError (bad rig file), each a one-line message."""
    if demo or sim_file:
        from gpumix.power.supplies import LayoutError, rig_layout
        from gpumix.sim.rig import BUILTIN_RIGS, DEMO_RIG, load_builtin_rig, load_rig

        # --sim takes a file, or the name of a shipped rig (`gpumix rigs`) when no such file exists
        name = DEMO_RIG if not sim_file else sim_file if is_builtin_rig(sim_file) else None
        rig = load_builtin_rig(name) if name else load_rig(str(sim_file))
        hardware = simulated_hardware(rig, clock=clock, wall_clock=wall_clock)
        hardware.rig_source = name or str(Path(str(sim_file)).resolve())
        try:  # the rig's supplies and circuits, from RIG.power.toml beside it
            layout = rig_layout(BUILTIN_RIGS[name] if name else str(sim_file), builtin=bool(name), gpu_count=len(rig.gpus))
        except LayoutError as error:
            raise RigError(str(error)) from None
        hardware.power_layout = layout.to_json() if layout else None
        return hardware
    return Hardware(backend=NvmlBackend(clock=clock, wall_clock=wall_clock), source="nvml")


def is_builtin_rig(sim_file: str) -> bool:
    from gpumix.sim.rig import BUILTIN_RIGS

    return sim_file in BUILTIN_RIGS and not Path(sim_file).exists()


def _no_wait(seconds: float) -> None:
    pass


def simulated_hardware(
    rig: Rig, clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time
) -> Hardware:
    from gpumix.sim.machine import SimMachine
    from gpumix.sim.nvml import SimNvml

    machine = SimMachine(rig, clock=clock)
    # A PCIe pair waits 20 ms where time runs; a world on a manual clock moves only when ticked: no wait
    # (its second read is not newer, and the simulated window, which costs nothing, answers)
    sleep = time.sleep if clock is time.monotonic else _no_wait
    backend = NvmlBackend(nvml=SimNvml(machine), clock=clock, wall_clock=wall_clock, sleep=sleep)
    return Hardware(backend=backend, source=f"sim:{rig.name}", machine=machine, power_budget_w=rig.power_budget_w)
