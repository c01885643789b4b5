"""The snapshot: one JSON-ready dict with everything a client shows.

Its shape is the contract in `gpumix.wire.snapshot_types` (`Snapshot`, published as a JSON schema in
docs/json.md); the hub fills ranks, runs and findings. The TUI, `--once --json` and remote clients
all read this same shape.

Ranks of different jobs never wait for each other: whatever compares ranks
(stragglers, wait shares, a run's pace) groups them with `ranks_by_job`.
"""

from __future__ import annotations

import socket
from dataclasses import fields
from functools import cache
from typing import Any

from gpumix.hw.host import HostSample, ProcessSample
from gpumix.hw.pcie import link_bytes_per_s
from gpumix.hw.types import DriverInfo, GpuInfo, GpuSample, P2PLink
from gpumix.wire.snapshot_types import SCHEMA_VERSION, GpuRow, ProcessRow, Snapshot

SNAPSHOT_VERSION = SCHEMA_VERSION  # the contract's version (gpumix/wire/snapshot_types.py)
# A link is judged only under load: GeForce cards drop to gen1 at idle (P8).
UNDER_LOAD_UTIL_PCT = 30.0
UNDER_LOAD_PCIE_BYTES_PER_S = 1e9


def under_load(sample: GpuSample) -> bool:
    util = sample.util_gpu_pct or 0.0
    pcie = max(sample.pcie_rx_bytes_per_s or 0.0, sample.pcie_tx_bytes_per_s or 0.0)
    return util >= UNDER_LOAD_UTIL_PCT or pcie >= UNDER_LOAD_PCIE_BYTES_PER_S


def _share(rate: float | None, limit: float | None) -> float | None:
    if rate is None or not limit:
        return None
    return rate / limit


@cache
def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(kind))


@cache
def _field_set(kind: type) -> frozenset[str]:
    return frozenset(_field_names(kind))


def _values(record: Any) -> dict[str, Any]:
    """plain(record) where a copy follows anyway: the record's own __dict__ when it is exactly its fields,
    else a new dict of them."""
    values = getattr(record, "__dict__", None)
    if values is not None and values.keys() == _field_set(type(record)):
        return values  # type: ignore[no-any-return]
    return {name: getattr(record, name) for name in _field_names(type(record))}


def plain(record: Any) -> dict[str, Any]:
    """A flat dataclass as a dict: what dataclasses.asdict gives for records whose fields are all
    scalars (GpuInfo, GpuProcess, ProcessSample, DriverInfo, P2PLink), without its deep copy per field,
    which was most of a tick's snapshot build. A list field stays the record's own list: copy it.
    A record whose attributes are exactly its fields is its `__dict__` copied (its __init__ set them in
    field order): one call, not one getattr per field (issue 13: 24 per GPU a tick)."""
    values = _values(record)
    return values.copy() if values is getattr(record, "__dict__", None) else values


def host_row(host: HostSample) -> dict[str, Any]:
    """HostSample.to_json (dataclasses.asdict) without its recursive walk: the fields are scalars or
    lists of numbers, the lists copied (issue 13: 17 calls a tick for what this does in a few)."""
    row = plain(host)
    for name, value in row.items():
        if type(value) is list:  # noqa: E721 - exactly a list, as asdict copies it
            row[name] = list(value)
    return row


_INFO_ROWS_KEPT = 256
_info_rows: dict[int, tuple[GpuInfo, dict[str, Any]]] = {}  # id(info) -> (info, its row fields)


def _info_fields(info: GpuInfo) -> dict[str, Any]:
    """A GPU's static facts as row fields, made once per GpuInfo object (frozen, its fields scalars)
    rather than at every tick (issue 13); the row copies them. Found by identity: an lru_cache hashed
    the frozen dataclass, a Python call over its 13 fields, per GPU a tick. The entry holds the info,
    so its id is not reused while kept; at most _INFO_ROWS_KEPT are."""
    kept = _info_rows.get(id(info))
    if kept is not None and kept[0] is info:
        return kept[1]
    if len(_info_rows) >= _INFO_ROWS_KEPT:
        _info_rows.clear()
    fields_now = {**plain(info), "model": info.model, "tier": info.tier}
    _info_rows[id(info)] = (info, fields_now)
    return fields_now


def gpu_row(info: GpuInfo, sample: GpuSample, processes: dict[int, ProcessSample]) -> GpuRow:
    """Static facts, the tick's readings and what follows from them, for one GPU."""
    row: dict[str, Any] = {
        **_info_fields(info),
        **_values(sample),  # GpuSample.to_json without asdict's deep copy: its lists are copied here
    }
    if sample.clock_event_reasons is not None:
        row["clock_event_reasons"] = list(sample.clock_event_reasons)
    link_now = link_bytes_per_s(sample.pcie_link_gen_current, sample.pcie_link_width_current)
    row["pcie_link_bytes_per_s_current"] = link_now
    row["pcie_link_bytes_per_s_max"] = link_bytes_per_s(info.pcie_gen_max, info.pcie_width_max)
    row["pcie_rx_link_share"] = _share(sample.pcie_rx_bytes_per_s, link_now)
    row["pcie_tx_link_share"] = _share(sample.pcie_tx_bytes_per_s, link_now)
    row["under_load"] = under_load(sample)
    below_max = (
        sample.pcie_link_gen_current is not None
        and info.pcie_gen_max is not None
        and sample.pcie_link_gen_current < info.pcie_gen_max
    ) or (
        sample.pcie_link_width_current is not None
        and info.pcie_width_max is not None
        and sample.pcie_link_width_current < info.pcie_width_max
    )
    row["pcie_link_below_max_under_load"] = bool(below_max and row["under_load"])
    row["processes"] = [
        ProcessRow(**plain(proc), **_process_fields(processes.get(proc.pid))) for proc in sample.processes
    ]
    return row  # type: ignore[return-value]  # GpuRow(**row) made the same dict again


def _process_fields(process: ProcessSample | None) -> dict[str, Any]:
    if process is None:
        return {"name": None, "user": None, "cpu_pct": None, "rss_bytes": None, "command": None}
    row = plain(process)
    row.pop("pid")
    return row


def link_rows(p2p: list[P2PLink]) -> list[dict[str, Any]]:
    """The GPU-to-GPU links as the snapshot's rows: the hub makes them once, the topology being fixed
    while it runs (45 pairs on a 10-GPU rig: a share of each tick, issue 13)."""
    return [plain(link) for link in p2p]


def build_snapshot(
    *,
    timestamp_s: float,
    source: str,
    driver: DriverInfo,
    infos: list[GpuInfo],
    samples: list[GpuSample],
    host: HostSample | None,
    processes: dict[int, ProcessSample],
    p2p: list[P2PLink],
    hostname: str | None = None,
    p2p_rows: list[dict[str, Any]] | None = None,
) -> Snapshot:
    """`p2p_rows`: `link_rows(p2p)` made beforehand, copied here (each snapshot its own rows); None:
    made from `p2p`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "version": SNAPSHOT_VERSION,
        "timestamp_s": timestamp_s,
        "hostname": hostname or socket.gethostname(),
        "source": source,
        "driver": plain(driver),
        "gpus": [gpu_row(info, sample, processes) for info, sample in zip(infos, samples, strict=True)],
        "host": host_row(host) if host else None,
        "p2p": link_rows(p2p) if p2p_rows is None else [dict(row) for row in p2p_rows],
        "ranks": [],
        "run": None,
        "runs": {},
        "findings": [],
        "plan": None,
    }
