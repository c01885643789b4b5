"""A machine's power wiring (supplies, the GPUs each feeds, wall circuits): read from TOML, checked whole.

A machine declares its layout in TOML (a `[power]` table: in a rig file for the simulator,
in a file of its own for a real machine, `gpumix hub --power-config FILE`):

    [power]
    headroom = 0.10          # share of every limit kept free for transients (4090 bursts)
    slot_share = 0.15        # share of a GPU's draw that comes through its PCIe slot

    [[power.circuits]]
    name = "wall-A"
    volts = 230
    amps = 16
    continuous_share = 0.8   # a breaker carries 80 % of its rating continuously

    [[power.supplies]]
    name = "psu-main"
    rating_w = 1600
    circuit = "wall-A"
    efficiency = 0.92        # DC out / AC in: the wall sees more than the GPUs draw
    board = true             # feeds the main board: every slot's share, and other_w
    other_w = 250            # CPU, board, drives, fans
    gpus = [3, 4]            # GPUs whose PCIe power cables it feeds

Pure functions; bad input is one line (LayoutError) and changes nothing. What the layout's budgets
are and how caps are fitted under them: `gpumix.power.supplies`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import tomllib

from gpumix.wire.bounded_file import BoundedFileError, read_bounded_text

MAX_LAYOUT_BYTES = 64 * 1024
MAX_SUPPLIES = 32
MAX_CIRCUITS = 16
MAX_GPUS = 64
NAME_CHARS = 32
DEFAULT_HEADROOM = 0.10
DEFAULT_SLOT_SHARE = 0.15  # a 4090 takes ~60 W of 450 W through its slot (the slot allows 75 W)


class LayoutError(ValueError):
    """A layout that cannot be used; str() is the one line shown."""


@dataclass(frozen=True)
class Circuit:
    name: str
    volts: float
    amps: float
    continuous_share: float

    @property
    def limit_w(self) -> float:
        """What the circuit carries continuously (AC watts)."""
        return self.volts * self.amps * self.continuous_share


@dataclass(frozen=True)
class Supply:
    name: str
    rating_w: float
    circuit: str | None
    efficiency: float
    board: bool
    other_w: float
    gpus: tuple[int, ...]
    slot_gpus: tuple[int, ...]  # GPUs on powered risers: their slot share comes from here


@dataclass(frozen=True)
class PowerLayout:
    supplies: tuple[Supply, ...]
    circuits: tuple[Circuit, ...]
    headroom: float = DEFAULT_HEADROOM
    slot_share: float = DEFAULT_SLOT_SHARE

    def to_json(self) -> dict[str, Any]:
        return {
            "headroom": self.headroom, "slot_share": self.slot_share,
            "supplies": [{"name": s.name, "rating_w": s.rating_w, "circuit": s.circuit, "efficiency": s.efficiency,
                          "board": s.board, "other_w": s.other_w, "gpus": list(s.gpus), "slot_gpus": list(s.slot_gpus)}
                         for s in self.supplies],
            "circuits": [{"name": c.name, "volts": c.volts, "amps": c.amps, "continuous_share": c.continuous_share}
                         for c in self.circuits],
        }

    def with_headroom(self, headroom: float) -> PowerLayout:
        if not (math.isfinite(headroom) and 0.0 <= headroom < 0.9):
            raise LayoutError(f"headroom must be a share from 0 to 0.9, got {headroom:g}")
        return replace(self, headroom=headroom)


def _number(table: dict[str, Any], key: str, where: str, low: float, high: float,
            default: float | None = None) -> float:
    value = table.get(key, default)
    if value is None:
        raise LayoutError(f"{where}.{key}: missing")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not low <= value <= high:
        raise LayoutError(f"{where}.{key}: must be a number from {low:g} to {high:g}, got {value!r:.40}")
    return float(value)


def _name(table: dict[str, Any], where: str) -> str:
    name = table.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= NAME_CHARS or not name.isprintable():
        raise LayoutError(f"{where}.name: must be printable text of 1-{NAME_CHARS} characters")
    return name


def _gpu_list(table: dict[str, Any], key: str, where: str, gpu_count: int | None) -> tuple[int, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or len(value) > MAX_GPUS or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise LayoutError(f"{where}.{key}: must be a list of GPU indices")
    top = gpu_count if gpu_count is not None else MAX_GPUS
    bad = [i for i in value if not 0 <= i < top]
    if bad:
        raise LayoutError(f"{where}.{key}: no GPU {bad[0]} (GPUs 0-{top - 1})")
    if len(set(value)) != len(value):
        raise LayoutError(f"{where}.{key}: a GPU is named twice")
    return tuple(value)


def _check_keys(table: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise LayoutError(f"{where}.{unknown[0]}: unknown field (known: {', '.join(sorted(allowed))})")


def parse_layout(power: Any, gpu_count: int | None = None) -> PowerLayout:
    """The `[power]` table of a rig or config file, checked whole."""
    if not isinstance(power, dict):
        raise LayoutError("power: must be a table")
    _check_keys(power, {"headroom", "slot_share", "supplies", "circuits"}, "power")
    headroom = _number(power, "headroom", "power", 0.0, 0.9, DEFAULT_HEADROOM)
    slot_share = _number(power, "slot_share", "power", 0.0, 1.0, DEFAULT_SLOT_SHARE)
    raw_circuits, raw_supplies = power.get("circuits", []), power.get("supplies", [])
    if not isinstance(raw_circuits, list) or len(raw_circuits) > MAX_CIRCUITS:
        raise LayoutError(f"power.circuits: must be a list of at most {MAX_CIRCUITS} tables")
    if not isinstance(raw_supplies, list) or not 0 < len(raw_supplies) <= MAX_SUPPLIES:
        raise LayoutError(f"power.supplies: must be a list of 1-{MAX_SUPPLIES} tables")
    circuits = _circuits(raw_circuits)
    supplies = _supplies(raw_supplies, [c.name for c in circuits], gpu_count)
    _check_feeding(supplies, gpu_count)
    return PowerLayout(tuple(supplies), tuple(circuits), headroom, slot_share)


def _circuits(raw: list[Any]) -> list[Circuit]:
    circuits = []
    for number, table in enumerate(raw):
        where = f"power.circuits[{number}]"
        if not isinstance(table, dict):
            raise LayoutError(f"{where}: must be a table")
        _check_keys(table, {"name", "volts", "amps", "continuous_share"}, where)
        circuits.append(Circuit(_name(table, where), _number(table, "volts", where, 90, 480),
                                _number(table, "amps", where, 1, 200),
                                _number(table, "continuous_share", where, 0.1, 1.0, 0.8)))
    names = [c.name for c in circuits]
    if len(set(names)) != len(names):
        raise LayoutError("power.circuits: two circuits share a name")
    return circuits


def _supplies(raw: list[Any], names: list[str], gpu_count: int | None) -> list[Supply]:
    supplies = []
    for number, table in enumerate(raw):
        where = f"power.supplies[{number}]"
        if not isinstance(table, dict):
            raise LayoutError(f"{where}: must be a table")
        _check_keys(table, {"name", "rating_w", "circuit", "efficiency", "board", "other_w", "gpus", "slot_gpus"}, where)
        circuit = table.get("circuit")
        if circuit is not None and circuit not in names:
            raise LayoutError(f"{where}.circuit: no circuit named {circuit!r:.40}"
                              + (f" (known: {', '.join(names)})" if names else " (power.circuits is empty)"))
        board = table.get("board", False)
        if not isinstance(board, bool):
            raise LayoutError(f"{where}.board: must be true or false")
        supplies.append(Supply(_name(table, where), _number(table, "rating_w", where, 50, 10_000), circuit,
                               _number(table, "efficiency", where, 0.5, 1.0, 0.9), board,
                               _number(table, "other_w", where, 0, 5000, 0.0),
                               _gpu_list(table, "gpus", where, gpu_count), _gpu_list(table, "slot_gpus", where, gpu_count)))
    if len({s.name for s in supplies}) != len(supplies):
        raise LayoutError("power.supplies: two supplies share a name")
    return supplies


def _check_feeding(supplies: list[Supply], gpu_count: int | None) -> None:
    """One board supply at most, no GPU fed twice and, with the GPU count known, every GPU fed."""
    boards = [s.name for s in supplies if s.board]
    if len(boards) > 1:
        raise LayoutError(f"power.supplies: only one supply feeds the main board, got {', '.join(boards)}")
    for key, what in (("gpus", "power cables"), ("slot_gpus", "riser slot")):
        fed = [g for s in supplies for g in getattr(s, key)]
        twice = sorted({g for g in fed if fed.count(g) > 1})
        if twice:
            raise LayoutError(f"power.supplies: GPU {twice[0]}'s {what} are fed by two supplies")
    if gpu_count is not None:
        fed = {g for s in supplies for g in s.gpus}
        missing = [g for g in range(gpu_count) if g not in fed]
        if missing:
            raise LayoutError(f"power.supplies: GPU {missing[0]} is fed by no supply (each GPU's cables need one)")
        riser = {g for s in supplies for g in s.slot_gpus}
        if not boards and any(g not in riser for g in range(gpu_count)):
            raise LayoutError("power.supplies: no supply has board = true, so the GPUs' slot power has no source")


def load_layout(path: str | Path, gpu_count: int | None = None) -> PowerLayout:
    """A power config file (or a rig file: its `[power]` table). One line on any error."""
    path = Path(path)
    try:
        table = tomllib.loads(read_bounded_text(path, MAX_LAYOUT_BYTES, "power config"))
    except BoundedFileError as error:
        raise LayoutError(str(error)) from None
    except tomllib.TOMLDecodeError as error:
        raise LayoutError(f"{path}: not TOML: {error}") from None
    if "power" not in table:
        raise LayoutError(f"{path}: no [power] table")
    try:
        return parse_layout(table["power"], gpu_count)
    except LayoutError as error:
        raise LayoutError(f"{path}: {error}") from None


def rig_layout(rig_file: str, builtin: bool = False, gpu_count: int | None = None) -> PowerLayout | None:
    """A rig's wiring: the `[power]` table of RIG.power.toml beside the rig file (shipped rigs: in
    gpumix/rigs), or None when there is none. A file that is there but wrong raises LayoutError."""
    name = Path(rig_file).with_suffix(".power.toml").name
    if builtin:
        resource = resources.files("gpumix.rigs").joinpath(name)
        if not resource.is_file():
            return None
        with resources.as_file(resource) as path:
            return load_layout(path, gpu_count)
    path = Path(rig_file).with_suffix(".power.toml")
    return load_layout(path, gpu_count) if path.exists() else None


def layout_from_json(value: Any, gpu_count: int | None = None) -> PowerLayout | None:
    """The layout a snapshot carries (`power_layout`), or None when it has none or it does not parse."""
    if value is None:
        return None
    try:
        return parse_layout(value, gpu_count)
    except LayoutError:
        return None

