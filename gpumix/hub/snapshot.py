"""The snapshot: one JSON-ready dict with everything a client shows.

Its shape is the contract in `gpumix.wire.snapshot_types` (`Snapshot`, published as a JSON schema in
docs/json.md); the hub fills ranks, runs and findings. The TUI, `--once --json` and remote clients
all read this same shape.

Ranks of different jobs never wait for each other: whatever compares ranks
(stragglers, wait shares, a run's pace) groups them with `ranks_by_job`.
"""

from __future__ import annotations

import socket
from dataclasses import asdict
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


def gpu_row(info: GpuInfo, sample: GpuSample, processes: dict[int, ProcessSample]) -> GpuRow:
    """Static facts, the tick's readings and what follows from them, for one GPU."""
    row: dict[str, Any] = {
        **asdict(info),
        "model": info.model,
        "tier": info.tier,
        **sample.to_json(),
    }
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
        ProcessRow(**asdict(proc), **_process_fields(processes.get(proc.pid))) for proc in sample.processes
    ]
    return GpuRow(**row)


def _process_fields(process: ProcessSample | None) -> dict[str, Any]:
    if process is None:
        return {"name": None, "user": None, "cpu_pct": None, "rss_bytes": None, "command": None}
    fields = asdict(process)
    fields.pop("pid")
    return fields


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
) -> Snapshot:
    return {
        "schema_version": SCHEMA_VERSION,
        "version": SNAPSHOT_VERSION,
        "timestamp_s": timestamp_s,
        "hostname": hostname or socket.gethostname(),
        "source": source,
        "driver": asdict(driver),
        "gpus": [gpu_row(info, sample, processes) for info, sample in zip(infos, samples, strict=True)],
        "host": host.to_json() if host else None,
        "p2p": [asdict(link) for link in p2p],
        "ranks": [],
        "run": None,
        "runs": {},
        "findings": [],
        "plan": None,
    }
