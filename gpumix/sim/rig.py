"""Rig files: a simulated machine of GPUs, described in TOML and validated.

A rig names GPU models from the catalogue (gpumix/rigs/models.toml) or its
own `[models.KEY]` tables, and lists its GPUs with the PCIe slot each sits
in. Every field is checked for its type, a finite value and its range, every
string for length and control characters; every error names the file, the
line and the field, in one line.

The models are read in `gpumix.sim.gpu_models`, the fields checked in `gpumix.sim.rig_fields`;
`RigError` and `GpuModel` stay importable from here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from gpumix.sim.gpu_models import PCIE_GENS, PCIE_WIDTHS, GpuModel, builtin_models, parse_model
from gpumix.sim.rig_fields import NUMBER, Locator, RigError, Spec, check_fields, load_toml, shown
from gpumix.wire.bounded_file import BoundedFileError, read_bounded_text

__all__ = ["BUILTIN_RIGS", "DEMO_RIG", "GpuModel", "Rig", "RigError", "SimGpuSpec", "load_builtin_rig",
           "load_rig", "parse_rig"]


@dataclass(frozen=True)
class SimGpuSpec:
    model: GpuModel
    slot_gen: int
    slot_width: int
    behind_chipset: bool  # attached through the chipset, not the CPU's own lanes
    uuid: str
    pci_bus_id: str
    nvlink_peer: int | None = None  # the GPU an NVLink bridge joins this one to
    nvlink_links: int = 0  # links in that bridge (a 3090 bridge: 4)

    @property
    def link_gen_max(self) -> int:
        return min(self.model.pcie_gen, self.slot_gen)

    @property
    def link_width_max(self) -> int:
        return min(self.model.pcie_width, self.slot_width)


@dataclass(frozen=True)
class Rig:
    name: str
    description: str
    seed: int
    driver_version: str
    cuda_driver_version: str  # "12.8"
    power_budget_w: float | None
    p2p_supported: bool  # GeForce refuses P2P; a rig may model cards (or old drivers) that allow it
    gpus: tuple[SimGpuSpec, ...]
    source: str  # the file it came from
    host_memory_bytes_per_s: float | None = None  # what host memory copies at (the all-reduce's staging)


_GPU_FIELDS: Spec = {
    "model": (str, True, (1, 128)),
    "slot_gen": (int, False, None),
    "slot_width": (int, True, None),
    "behind_chipset": (bool, False, None),
    "nvlink_peer": (int, False, None),
    "nvlink_links": (int, False, None),
}
_TOP_FIELDS: Spec = {
    "name": (str, True, (1, 128)),
    "description": (str, False, (0, 1000)),
    "seed": (int, False, (0, 2**32 - 1)),
    "driver_version": (str, False, (1, 64)),
    "cuda_driver_version": (str, False, (1, 64)),
    "power_budget_w": (NUMBER, False, (1, 1_000_000)),
    "host_memory_gb_s": (NUMBER, False, (1, 10_000)),
    "p2p_supported": (bool, False, None),
    "models": (dict, False, (0, 256)),
    "gpus": (list, True, (0, 64)),  # none: the clearer line below
}
MAX_RIG_BYTES = 1024**2  # a rig file is a few hundred bytes; a larger one is a mistake
_Fail = Callable[..., None]  # raises RigError naming (table, field, message[, occurrence]); never returns


def parse_rig(text: str, source: str) -> Rig:
    """Parse and validate a rig; raise RigError naming file, line and field."""
    data = load_toml(text, source)
    locator = Locator(text)

    def fail(table: str | None, field: str | None, message: str, occurrence: int = 0) -> None:
        raise RigError(f"{source}:{locator.line(table, field, occurrence)}: {message}")

    check_fields(data, _TOP_FIELDS, "rig", lambda field, message: fail(None, field, message.removeprefix("rig.").removeprefix("rig: ")))
    models = _models(data, fail)
    if not data["gpus"]:
        fail(None, "gpus", "gpus: a rig needs at least one [[gpus]] entry")
    seed = data.get("seed", 0)
    specs = [_gpu_spec(number, table, models, seed, fail) for number, table in enumerate(data["gpus"])]
    _check_nvlink(specs, fail)
    budget = data.get("power_budget_w")
    return Rig(
        name=data["name"],
        description=data.get("description", ""),
        seed=seed,
        driver_version=data.get("driver_version", "570.153.02"),
        cuda_driver_version=data.get("cuda_driver_version", "12.8"),
        power_budget_w=float(budget) if budget is not None else None,
        p2p_supported=data.get("p2p_supported", False),
        gpus=tuple(specs),
        source=source,
        host_memory_bytes_per_s=float(data["host_memory_gb_s"]) * 1e9 if "host_memory_gb_s" in data else None,
    )


def _models(data: dict[str, Any], fail: _Fail) -> dict[str, GpuModel]:
    """The catalogue's models and the rig's own `[models.KEY]` tables (which replace a key they share)."""
    models = builtin_models()
    for key, table in data.get("models", {}).items():
        if not isinstance(table, dict):
            fail(None, "models", f"models.{key}: expected a table")
        if not re.fullmatch(r"[\w.-]{1,64}", key):
            fail(None, "models", f"models.{shown(key)}: a model key is 1-64 letters, digits, '_', '-' or '.'")
        models[key] = parse_model(key, table, fail)
    return models


def _gpu_spec(number: int, table: Any, models: dict[str, GpuModel], seed: int, fail: _Fail) -> SimGpuSpec:
    where = f"gpus[{number}]"

    def gpu_fail(field: str | None, message: str) -> None:
        fail("gpus", field, message, number)

    if not isinstance(table, dict):
        fail(None, "gpus", f"{where}: expected a [[gpus]] table, got {shown(table)}")
    check_fields(table, _GPU_FIELDS, where, gpu_fail)
    model = models.get(table["model"])
    if model is None:
        known = ", ".join(sorted(models))
        gpu_fail("model", f"{where}.model: unknown model '{table['model']}' (known: {known})")
    slot_gen = table.get("slot_gen", model.pcie_gen)
    if slot_gen not in PCIE_GENS:
        gpu_fail("slot_gen", f"{where}.slot_gen: must be one of {PCIE_GENS}, got {slot_gen}")
    if table["slot_width"] not in PCIE_WIDTHS:
        gpu_fail("slot_width", f"{where}.slot_width: must be one of {PCIE_WIDTHS}, got {table['slot_width']}")
    return SimGpuSpec(
        model=model,
        slot_gen=slot_gen,
        slot_width=table["slot_width"],
        behind_chipset=table.get("behind_chipset", False),
        uuid=_sim_uuid(seed, number),
        pci_bus_id=f"00000000:{0x10 + number * 0x10:02X}:00.0",
        nvlink_peer=table.get("nvlink_peer"),
        nvlink_links=table.get("nvlink_links", 4) if "nvlink_peer" in table else 0,
    )


def _check_nvlink(specs: list[SimGpuSpec], fail: _Fail) -> None:
    """A bridge joins two cards: each names the other, with the same number of links."""
    for number, spec in enumerate(specs):
        peer = spec.nvlink_peer
        if peer is None:
            continue
        if not 0 <= peer < len(specs) or peer == number:
            fail("gpus", "nvlink_peer", f"gpus[{number}].nvlink_peer: must be another GPU's index (0-{len(specs) - 1}),"
                 f" got {peer}", number)
        if specs[peer].nvlink_peer != number or specs[peer].nvlink_links != spec.nvlink_links:
            fail("gpus", "nvlink_peer", f"gpus[{number}].nvlink_peer: gpus[{peer}] must name {number} back,"
                 " with the same nvlink_links", number)
        if not 1 <= spec.nvlink_links <= 18:
            fail("gpus", "nvlink_links", f"gpus[{number}].nvlink_links: must be 1-18, got {spec.nvlink_links}", number)


def _sim_uuid(seed: int, number: int) -> str:
    """Stable, UUID-shaped, and obviously simulated."""
    return f"GPU-51a1a7ed-{seed % 0x10000:04x}-{number:04x}-{(seed * 7919 + number) % 16**12:012x}"


def load_rig(path: str | Path) -> Rig:
    path = Path(path)
    try:
        text = read_bounded_text(path, MAX_RIG_BYTES, "rig file")
    except BoundedFileError as error:
        raise RigError(str(error)) from None
    return parse_rig(text, str(path))


BUILTIN_RIGS = {"mixed-10": "mixed10.toml", "5070ti-x2": "rtx5070ti_x2.toml", "4090-x2-desktop": "rtx4090_x2_desktop.toml"}
DEMO_RIG = "mixed-10"


def load_builtin_rig(name: str) -> Rig:
    filename = BUILTIN_RIGS[name]
    text = resources.files("gpumix.rigs").joinpath(filename).read_text()
    return parse_rig(text, f"gpumix/rigs/{filename}")
