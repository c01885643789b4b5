"""Rig files: a simulated machine of GPUs, described in TOML and validated.

A rig names GPU models from the catalogue (gpumix/rigs/models.toml) or its
own `[models.KEY]` tables, and lists its GPUs with the PCIe slot each sits
in. Every field is checked for its type, a finite value and its range, every
string for length and control characters; every error names the file, the
line and the field, in one line.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from gpumix.wire.bounded_file import BoundedFileError, read_bounded_text


class RigError(ValueError):
    """A bad rig file: str(error) is the one line the user sees."""


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


_NUMBER = (int, float)
_Spec = dict[str, tuple[type | tuple[type, ...], bool, tuple[float, float] | None]]

_MODEL_FIELDS: _Spec = {
    # field: (type, required, (lowest, highest) for a number, the length for a string or list)
    "name": (str, True, (1, 128)),
    "mem_gib": (_NUMBER, True, (0.125, 4096)),
    "tdp_w": (_NUMBER, True, (1, 5000)),
    "power_limit_min_w": (_NUMBER, True, (1, 5000)),
    "power_limit_max_w": (_NUMBER, True, (1, 5000)),
    "idle_power_w": (_NUMBER, False, (0, 5000)),
    "pcie_gen": (int, True, None),
    "pcie_width": (int, True, None),
    "relative_speed": (_NUMBER, True, (0.001, 1000)),
    "sm_clock_max_mhz": (int, False, (1, 10_000)),
    "mem_clock_mhz": (int, False, (1, 50_000)),
    "has_fan": (bool, False, None),
    "unsupported_calls": (list, False, (0, 64)),
}
_GPU_FIELDS: _Spec = {
    "model": (str, True, (1, 128)),
    "slot_gen": (int, False, None),
    "slot_width": (int, True, None),
    "behind_chipset": (bool, False, None),
    "nvlink_peer": (int, False, None),
    "nvlink_links": (int, False, None),
}
_TOP_FIELDS: _Spec = {
    "name": (str, True, (1, 128)),
    "description": (str, False, (0, 1000)),
    "seed": (int, False, (0, 2**32 - 1)),
    "driver_version": (str, False, (1, 64)),
    "cuda_driver_version": (str, False, (1, 64)),
    "power_budget_w": (_NUMBER, False, (1, 1_000_000)),
    "host_memory_gb_s": (_NUMBER, False, (1, 10_000)),
    "p2p_supported": (bool, False, None),
    "models": (dict, False, (0, 256)),
    "gpus": (list, True, (0, 64)),  # none: the clearer line below
}
_PCIE_GENS = (1, 2, 3, 4, 5, 6)
_PCIE_WIDTHS = (1, 2, 4, 8, 16)
MAX_RIG_BYTES = 1024**2  # a rig file is a few hundred bytes; a larger one is a mistake
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # text shown in the TUI: no escape sequences


class _Locator:
    """Finds the line of a field in the TOML text, for error messages."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def _header_line(self, pattern: str, occurrence: int = 0) -> int | None:
        seen = 0
        for number, line in enumerate(self.lines, start=1):
            if re.match(pattern, line.strip()):
                if seen == occurrence:
                    return number
                seen += 1
        return None

    def _field_line(self, start: int, field: str) -> int | None:
        for number in range(start + 1, len(self.lines) + 1):
            line = self.lines[number - 1].strip()
            if line.startswith("["):
                return None
            if re.match(rf"{re.escape(field)}\s*=", line):
                return number
        return None

    def line(self, table: str | None, field: str | None, occurrence: int = 0) -> int:
        """Line of `field` in `table` ([[gpus]] #occurrence, [models.KEY], or top level)."""
        if table is None:
            start = 0
        elif table == "gpus":
            start = self._header_line(r"\[\[\s*gpus\s*\]\]", occurrence) or 0
        else:
            key = re.escape(table.split(".", 1)[1])
            start = self._header_line(rf"\[\s*models\.\"?{key}\"?\s*\]") or 0
        found = self._field_line(start, field) if field else None
        if found is None and table is None and field:  # a top-level array of tables: [[gpus]]
            found = self._header_line(rf"\[\[?\s*{re.escape(field)}[\s.\]]")
        return found or start or 1


def _check_fields(table: dict[str, Any], spec: _Spec, where: str, fail: Any) -> None:
    """Each field of `spec`: present if required, of its type, finite and in its range (a
    string or list: its length), a string without control characters; no other fields."""
    for field in table:
        if field not in spec:
            fail(field, f"{where}.{field}: unknown field")
    for field, (kind, required, bounds) in spec.items():
        if field not in table:
            if required:
                fail(None, f"{where}: missing field '{field}'")
            continue
        value = table[field]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int in Python, but `slot_width = true` is a mistake.
        if not isinstance(value, kinds) or isinstance(value, bool) != (bool in kinds):
            fail(field, f"{where}.{field}: expected {_kind_name(kind)}, got {_shown(value)}")
        if bounds is None:
            continue
        low, high = bounds
        if isinstance(value, int | float) and not (math.isfinite(value) and low <= value <= high):
            fail(field, f"{where}.{field}: must be {low:g} to {high:.10g}, got {_shown(value)}")
        if isinstance(value, str | list | dict) and not low <= len(value) <= high:
            fail(field, f"{where}.{field}: must hold {low:g} to {high:g} {'characters' if isinstance(value, str) else 'entries'},"
                 f" got {len(value)}")
        if isinstance(value, str) and _CONTROL.search(value):
            fail(field, f"{where}.{field}: must not hold control characters, got {_shown(value)}")


def _shown(value: Any) -> str:
    """A value for an error line: its repr (escapes made visible), at most 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "a number", float: "a number", str: "a string", bool: "true or false", list: "a list", dict: "a table"}
    return " or ".join(dict.fromkeys(names[k] for k in kinds))


def _parse_model(key: str, table: dict[str, Any], fail: Any) -> GpuModel:
    where = f"models.{key}"

    def model_fail(field: str | None, message: str) -> None:
        fail(where, field, message)

    _check_fields(table, _MODEL_FIELDS, where, model_fail)
    low, high, tdp = table["power_limit_min_w"], table["power_limit_max_w"], table["tdp_w"]
    if not 0 < low <= tdp <= high:
        model_fail("tdp_w", f"{where}: need 0 < power_limit_min_w <= tdp_w <= power_limit_max_w, got {low} / {tdp} / {high}")
    if table["pcie_gen"] not in _PCIE_GENS:
        model_fail("pcie_gen", f"{where}.pcie_gen: must be one of {_PCIE_GENS}, got {table['pcie_gen']}")
    if table["pcie_width"] not in _PCIE_WIDTHS:
        model_fail("pcie_width", f"{where}.pcie_width: must be one of {_PCIE_WIDTHS}, got {table['pcie_width']}")
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


def _load_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise RigError(f"{source}:1: invalid TOML: nested too deeply") from None
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        match = re.search(r"\(at line (\d+), column \d+\)", message)
        line = match.group(1) if match else "1"
        reason = re.sub(r"\s*\(at line.*\)", "", message)
        raise RigError(f"{source}:{line}: invalid TOML: {reason}") from None


def _catalogue_text() -> str:
    return resources.files("gpumix.rigs").joinpath("models.toml").read_text()


def builtin_models() -> dict[str, GpuModel]:
    source = "gpumix/rigs/models.toml"
    data = _load_toml(_catalogue_text(), source)
    locator = _Locator(_catalogue_text())

    def fail(table: str | None, field: str | None, message: str) -> None:
        raise RigError(f"{source}:{locator.line(table, field)}: {message}")

    return {key: _parse_model(key, table, fail) for key, table in data.get("models", {}).items()}


def parse_rig(text: str, source: str) -> Rig:
    """Parse and validate a rig; raise RigError naming file, line and field."""
    data = _load_toml(text, source)
    locator = _Locator(text)

    def fail(table: str | None, field: str | None, message: str, occurrence: int = 0) -> None:
        raise RigError(f"{source}:{locator.line(table, field, occurrence)}: {message}")

    _check_fields(data, _TOP_FIELDS, "rig", lambda field, message: fail(None, field, message.removeprefix("rig.").removeprefix("rig: ")))
    models = builtin_models()
    for key, table in data.get("models", {}).items():
        if not isinstance(table, dict):
            fail(None, "models", f"models.{key}: expected a table")
        if not re.fullmatch(r"[\w.-]{1,64}", key):
            fail(None, "models", f"models.{_shown(key)}: a model key is 1-64 letters, digits, '_', '-' or '.'")
        models[key] = _parse_model(key, table, fail)
    if not data["gpus"]:
        fail(None, "gpus", "gpus: a rig needs at least one [[gpus]] entry")
    seed = data.get("seed", 0)
    specs = []
    for number, table in enumerate(data["gpus"]):
        where = f"gpus[{number}]"

        def gpu_fail(field: str | None, message: str, number: int = number) -> None:
            fail("gpus", field, message, number)

        if not isinstance(table, dict):
            fail(None, "gpus", f"{where}: expected a [[gpus]] table, got {_shown(table)}")
        _check_fields(table, _GPU_FIELDS, where, gpu_fail)
        model = models.get(table["model"])
        if model is None:
            known = ", ".join(sorted(models))
            gpu_fail("model", f"{where}.model: unknown model '{table['model']}' (known: {known})")
        slot_gen = table.get("slot_gen", model.pcie_gen)
        if slot_gen not in _PCIE_GENS:
            gpu_fail("slot_gen", f"{where}.slot_gen: must be one of {_PCIE_GENS}, got {slot_gen}")
        if table["slot_width"] not in _PCIE_WIDTHS:
            gpu_fail("slot_width", f"{where}.slot_width: must be one of {_PCIE_WIDTHS}, got {table['slot_width']}")
        specs.append(
            SimGpuSpec(
                model=model,
                slot_gen=slot_gen,
                slot_width=table["slot_width"],
                behind_chipset=table.get("behind_chipset", False),
                uuid=_sim_uuid(seed, number),
                pci_bus_id=f"00000000:{0x10 + number * 0x10:02X}:00.0",
                nvlink_peer=table.get("nvlink_peer"),
                nvlink_links=table.get("nvlink_links", 4) if "nvlink_peer" in table else 0,
            )
        )
    for number, spec in enumerate(specs):  # a bridge joins two cards: each names the other
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
