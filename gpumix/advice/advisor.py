"""The advisor: findings about a mixed box, each with severity, evidence and fix.

Pure functions of a snapshot (and a few settings). Used by the TUI's findings
panel and by `gpumix doctor` (exit 0 healthy, 1 warnings, 2 errors).
"""

from __future__ import annotations

import functools
import operator
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpumix.advice.cpu_forwarding import cpu_forwarding_findings
from gpumix.advice.field import field_findings
from gpumix.advice.finding import SEVERITY_RANK, Finding
from gpumix.advice.probe_results import kept_probe, probe_findings
from gpumix.power.supplies import PowerLayout
from gpumix.power.tiers import tier_table
from gpumix.probe import store

__all__ = ["SEVERITY_RANK", "AdvisorSettings", "Finding", "exit_code", "findings"]
# Early drivers reported multi-4090 P2P as working while copies came out wrong (tinygrad notes,
# NVIDIA forum). The exact fixed version is not confirmed: a setting, not a truth.
DEFAULT_4090_P2P_MIN_DRIVER = "525.60.11"
PER_RANK_NCCL_VARS = {"NCCL_DEBUG_FILE"}  # one log per rank by design (the agent's transport probe sets it)
SHARED_TOPOLOGY = {"BOARD", "PIX", "PXB", "PHB"}  # closer than the system interconnect


def _min_driver_from_env() -> str:
    return os.environ.get("GPUMIX_4090_P2P_MIN_DRIVER") or DEFAULT_4090_P2P_MIN_DRIVER


@dataclass(frozen=True)
class AdvisorSettings:
    power_budget_w: float | None = None
    p2p_4090_min_driver: str = field(default_factory=_min_driver_from_env)
    has_infiniband: bool = False
    power_layout: PowerLayout | None = None  # supplies and circuits; else the snapshot's `power_layout`
    # kept `gpumix probe` results (read, never measured here); None: none are read
    probe_folder: Path | None = field(default_factory=store.state_dir)
    probe_stale_after_s: float = store.STALE_S


def _version(text: str | None) -> tuple[int, ...]:
    parts = []
    for part in (text or "").split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def _p2p(snapshot: dict[str, Any], settings: AdvisorSettings) -> list[Finding]:
    links = snapshot["p2p"]
    if not links:
        return []
    refused = [link for link in links if link["read"] != "OK"]
    found = []
    env_by_rank = [r.get("env", {}) for r in snapshot.get("ranks", [])]
    if refused:
        reasons = sorted({link["read"] or "N/A" for link in refused})
        fix = ("On GeForce cards this is the driver's choice, not a fault: set NCCL_P2P_DISABLE=1 (the safe"
               " setting) so NCCL goes through host memory (SHM) from the start, and keep SHM on"
               " (NCCL_SHM_DISABLE unset or 0): NCCL_SHM_DISABLE=1 removes that path and falls back to sockets.")
        unset = [i for i, env in enumerate(env_by_rank) if env.get("NCCL_P2P_DISABLE") != "1"]
        severity = "warning" if env_by_rank and unset else "info"
        found.append(Finding("p2p-unavailable", severity, "P2P between GPUs is unavailable",
                             f"{len(refused)} of {len(links)} GPU pairs refuse P2P ({', '.join(reasons)})"
                             + (f"; {len(unset)} rank(s) run without NCCL_P2P_DISABLE=1" if env_by_rank and unset else ""),
                             fix))
    shm_off = [r["rank"] for r in snapshot.get("ranks", []) if r.get("env", {}).get("NCCL_SHM_DISABLE") == "1"]
    if shm_off and refused:
        found.append(Finding("shm-disabled", "error", "NCCL_SHM_DISABLE=1 with P2P unavailable",
                             f"ranks {', '.join(map(str, shm_off))} set NCCL_SHM_DISABLE=1 while GPU pairs refuse P2P",
                             "Unset NCCL_SHM_DISABLE (or set 0): without SHM, traffic between GPUs goes through sockets."))
    gpus = {gpu["index"]: gpu for gpu in snapshot["gpus"]}
    p2p_4090 = [link for link in links if link["read"] == "OK"
                and "4090" in gpus[link["gpu_a"]]["name"] and "4090" in gpus[link["gpu_b"]]["name"]]
    driver = snapshot["driver"]["driver_version"]
    if p2p_4090 and _version(driver) < _version(settings.p2p_4090_min_driver):
        pairs = ", ".join(f"{link['gpu_a']}-{link['gpu_b']}" for link in p2p_4090)
        found.append(Finding("4090-p2p-old-driver", "error", "RTX 4090 P2P on an old driver",
                             f"driver {driver} reports P2P between RTX 4090s (pairs: "
                             f"{pairs}); silent corruption of P2P"
                             f" copies was reported for multi-4090 boxes on drivers before {settings.p2p_4090_min_driver}"
                             " (threshold configurable)",
                             "Set NCCL_P2P_DISABLE=1, or update the driver and verify P2P copies"
                             " (e.g. cuda-samples p2pBandwidthLatencyTest with verification).",
                             sorted({link["gpu_a"] for link in p2p_4090} | {link["gpu_b"] for link in p2p_4090})))
    return found


def _nccl_env(snapshot: dict[str, Any], settings: AdvisorSettings) -> list[Finding]:
    ranks = [r for r in snapshot.get("ranks", []) if r.get("connected")]
    if not ranks:
        return []
    found = []
    if not settings.has_infiniband and any("NCCL_IB_DISABLE" not in r.get("env", {}) for r in ranks):
        found.append(Finding("ib-disable-unset", "info", "NCCL_IB_DISABLE is not set on a box without InfiniBand",
                             "no InfiniBand device on this host; ranks leave NCCL_IB_DISABLE unset",
                             "Set NCCL_IB_DISABLE=1: NCCL then skips probing for InfiniBand at start."))
    by_job: dict[str | None, list[dict[str, Any]]] = {}
    for rank in ranks:
        by_job.setdefault(rank.get("job"), []).append(rank)
    for job, members in by_job.items():
        keys = sorted({k for r in members for k in r.get("env", {})
                       if k.startswith("NCCL_") and k not in PER_RANK_NCCL_VARS})
        differing = [k for k in keys if len({r.get("env", {}).get(k) for r in members}) > 1]
        if differing:
            detail = "; ".join(f"{k}: " + ", ".join(f"rank {r['rank']}={r.get('env', {}).get(k, 'unset')}" for r in members)
                               for k in differing[:3])
            found.append(Finding("nccl-env-disagree", "warning", "Ranks disagree on NCCL settings",
                                 f"job {job or '(unnamed)'}: {detail}",
                                 "Set NCCL variables once, in the launcher's environment, for every rank."))
    return found


def _links(snapshot: dict[str, Any]) -> list[Finding]:
    found = []
    for gpu in snapshot["gpus"]:
        if gpu["lost"]:
            found.append(Finding("gpu-lost", "error", f"GPU {gpu['index']} is lost",
                                 "NVML answers 'GPU is lost': it fell off the bus",
                                 "Check dmesg for Xid 79 (often power or riser); the card needs a reset or reboot.",
                                 [gpu["index"]]))
            continue
        if gpu["pcie_link_below_max_under_load"]:
            found.append(Finding("link-below-max", "warning", f"GPU {gpu['index']} link below its max under load",
                                 f"PCIe gen{gpu['pcie_link_gen_current']} x{gpu['pcie_link_width_current']} while busy;"
                                 f" it can do gen{gpu['pcie_gen_max']} x{gpu['pcie_width_max']}",
                                 "Reseat the card or riser, check the slot's gen setting in the BIOS, try another slot.",
                                 [gpu["index"]]))
        width = gpu["pcie_width_max"]
        if width is not None and width <= 4:
            found.append(Finding("narrow-link", "warning", f"GPU {gpu['index']} sits on an x{width} link",
                                 f"{gpu['tier']} limited to gen{gpu['pcie_gen_max']} x{width}"
                                 f" ({(gpu['pcie_link_bytes_per_s_max'] or 0) / 1e9:.1f} GB/s per direction)",
                                 "Without P2P every all-reduce crosses each GPU's link: the slowest link paces all"
                                 " of them. Move it to a wider CPU-attached slot, or keep it out of the job.",
                                 [gpu["index"]]))
    found.extend(_off_main_root(snapshot))
    return found


_LINK_CLASS = operator.itemgetter("gpu_a", "gpu_b", "topology")  # what the main-root split reads of a link


def _shared(topology: str | None) -> bool:
    return topology in SHARED_TOPOLOGY or (topology or "").startswith("NV")  # an NVLink bridge is closer still


def _off_main_root(snapshot: dict[str, Any]) -> list[Finding]:
    """GPUs that reach the others only across the system: behind the chipset or another socket."""
    count = len(snapshot["gpus"])
    if count < 3:
        return []
    split = _main_root_split(count, tuple(map(_LINK_CLASS, snapshot["p2p"])))  # one C call a link (issue 13)
    if split is None:
        return []
    main, outside = split
    return [Finding("off-main-root", "warning", f"GPUs {', '.join(map(str, outside))} are behind the chipset or another socket",
                    f"they reach GPUs {', '.join(map(str, main))} only across the system interconnect (SYS)",
                    "Their traffic to host memory shares the chipset's uplink: every all-reduce waits for it."
                    " Prefer CPU-attached slots for training GPUs.", list(outside))]


@functools.lru_cache(maxsize=4)  # the topology seldom changes: the hub asks with the same links every tick
def _main_root_split(count: int, links: tuple[tuple[int, int, str | None], ...]
                     ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(the largest group of GPUs that share a root, sorted; the others, sorted), or None when all share
    one or no two do. Keyed on everything it reads, so a changed link or GPU count is a new entry."""
    level = {(a, b): topology for a, b, topology in links}
    level.update({(b, a): t for (a, b), t in list(level.items())})
    groups: list[set[int]] = []
    for index in range(count):
        for group in groups:
            if all(_shared(level.get((index, other))) for other in group):
                group.add(index)
                break
        else:
            groups.append({index})
    main = max(groups, key=len)
    outside = sorted(set(range(count)) - main)
    if not outside or len(main) < 2:
        return None
    return tuple(sorted(main)), tuple(outside)


def _power(snapshot: dict[str, Any], settings: AdvisorSettings) -> list[Finding]:
    budget = settings.power_budget_w or snapshot.get("power_budget_w")
    if not budget:
        return []
    gpus = [g for g in snapshot["gpus"] if not g["lost"]]
    caps = sum(g["power_cap_w"] or 0.0 for g in gpus)
    if caps <= budget:
        return []
    draw = sum(g["power_w"] or 0.0 for g in gpus)
    return [Finding("caps-over-budget", "warning", "Power caps add up to more than the budget",
                    f"caps {caps:.0f} W (draw now {draw:.0f} W) against a {budget:.0f} W budget",
                    "Fit the caps to the budget: `b` in gpumix-top, or `gpumix power fit --budget "
                    f"{budget:.0f}`; waiting cards give up watts first.")]


def _tiers(table: list[dict[str, Any]]) -> list[Finding]:
    found = []
    for tier in table:
        if tier["flag"] is None:
            continue
        found.append(Finding(f"tier-{tier['flag']}", "warning",
                             f"{tier['tier']} tier is the {tier['flag']}" if tier["flag"] == "straggler"
                             else f"{tier['tier']} tier is underutilized",
                             tier["evidence"], "Options: " + "; ".join(tier["options"]) + ".", tier["gpus"]))
    return found


def findings(snapshot: dict[str, Any], settings: AdvisorSettings | None = None,
             tiers: list[dict[str, Any]] | None = None) -> list[Finding]:
    """`tiers`: the snapshot's `tier_table`, where the caller has just made it (the hub's merge);
    None: made here."""
    settings = settings or AdvisorSettings(has_infiniband=bool((snapshot.get("host") or {}).get("infiniband")))
    # Within a severity, what costs the job now comes first: the bottleneck and the tiers,
    # then settings and power, then the per-GPU link facts that explain them.
    kept = kept_probe(snapshot, settings.probe_folder, settings.probe_stale_after_s)
    result = [*cpu_forwarding_findings(snapshot, kept), *_tiers(tier_table(snapshot) if tiers is None else tiers), *_p2p(snapshot, settings),
              *_nccl_env(snapshot, settings), *_power(snapshot, settings),
              *field_findings(snapshot, settings.power_layout), *probe_findings(snapshot, kept), *_links(snapshot)]
    return sorted(result, key=lambda f: -SEVERITY_RANK[f.severity])  # stable: keeps that order


def exit_code(found: list[Finding]) -> int:
    return max((SEVERITY_RANK[f.severity] for f in found), default=0)
