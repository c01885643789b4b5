"""GPU models: the catalogue (gpumix/rigs/models.toml) and a rig's own `[models.KEY]` tables, checked."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gpumix.sim.rig_fields import NUMBER, Locator, RigError, Spec, check_fields, load_toml


@dataclass(frozen=True)
class GpuModel:
    key: str
    name: str  # as NVML names it: "NVIDIA GeForce RTX 3090"
    mem_gib: float
    tdp_w: float  # the default power limit
    power_limit_min_w: float
    power_limit_max_w: float
    idle_power_w: float
    pcie_gen: int  # what the card itself can do
    pcie_width: int
    relative_speed: float  # training throughput, RTX 3090 = 1.0
    sm_clock_max_mhz: int
    mem_clock_mhz: int
    has_fan: bool
    unsupported_calls: tuple[str, ...]  # NVML functions that answer NotSupported on this card


MODEL_FIELDS: Spec = {
    # field: (type, required, (lowest, highest) for a number, the length for a string or list)
    "name": (str, True, (1, 128)),
    "mem_gib": (NUMBER, True, (0.125, 4096)),
    "tdp_w": (NUMBER, True, (1, 5000)),
    "power_limit_min_w": (NUMBER, True, (1, 5000)),
    "power_limit_max_w": (NUMBER, True, (1, 5000)),
    "idle_power_w": (NUMBER, False, (0, 5000)),
    "pcie_gen": (int, True, None),
    "pcie_width": (int, True, None),
    "relative_speed": (NUMBER, True, (0.001, 1000)),
    "sm_clock_max_mhz": (int, False, (1, 10_000)),
    "mem_clock_mhz": (int, False, (1, 50_000)),
    "has_fan": (bool, False, None),
    "unsupported_calls": (list, False, (0, 64)),
}
PCIE_GENS = (1, 2, 3, 4, 5, 6)
PCIE_WIDTHS = (1, 2, 4, 8, 16)


def parse_model(key: str, table: dict[str, Any], fail: Any) -> GpuModel:
    where = f"models.{key}"

    def model_fail(field: str | None, message: str) -> None:
        fail(where, field, message)

    check_fields(table, MODEL_FIELDS, where, model_fail)
    low, high, tdp = table["power_limit_min_w"], table["power_limit_max_w"], table["tdp_w"]
    if not 0 < low <= tdp <= high:
        model_fail("tdp_w", f"{where}: need 0 < power_limit_min_w <= tdp_w <= power_limit_max_w, got {low} / {tdp} / {high}")
    if table["pcie_gen"] not in PCIE_GENS:
        model_fail("pcie_gen", f"{where}.pcie_gen: must be one of {PCIE_GENS}, got {table['pcie_gen']}")
    if table["pcie_width"] not in PCIE_WIDTHS:
        model_fail("pcie_width", f"{where}.pcie_width: must be one of {PCIE_WIDTHS}, got {table['pcie_width']}")
    idle = table.get("idle_power_w")
    if idle is not None and idle > high:
        model_fail("idle_power_w", f"{where}.idle_power_w: must be at most power_limit_max_w ({high}), got {idle}")
    unsupported = table.get("unsupported_calls", [])
    if not all(isinstance(call, str) and re.fullmatch(r"nvml\w{1,60}", call) for call in unsupported):
        model_fail("unsupported_calls", f"{where}.unsupported_calls: expected NVML function names like 'nvmlDeviceGetFanSpeed'")
    return GpuModel(
        key=key,
        name=table["name"],
        mem_gib=float(table["mem_gib"]),
        tdp_w=float(tdp),
        power_limit_min_w=float(low),
        power_limit_max_w=float(high),
        idle_power_w=float(table.get("idle_power_w", tdp * 0.08)),
        pcie_gen=table["pcie_gen"],
        pcie_width=table["pcie_width"],
        relative_speed=float(table["relative_speed"]),
        sm_clock_max_mhz=table.get("sm_clock_max_mhz", 1900),
        mem_clock_mhz=table.get("mem_clock_mhz", 9500),
        has_fan=table.get("has_fan", True),
        unsupported_calls=tuple(unsupported),
    )


def _catalogue_text() -> str:
    return resources.files("gpumix.rigs").joinpath("models.toml").read_text()


def builtin_models() -> dict[str, GpuModel]:
    source = "gpumix/rigs/models.toml"
    data = load_toml(_catalogue_text(), source)
    locator = Locator(_catalogue_text())

    def fail(table: str | None, field: str | None, message: str) -> None:
        raise RigError(f"{source}:{locator.line(table, field)}: {message}")

    return {key: parse_model(key, table, fail) for key, table in data.get("models", {}).items()}

