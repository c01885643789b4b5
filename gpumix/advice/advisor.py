"""The advisor: findings about a mixed box, each with severity, evidence and fix.

Pure functions of a snapshot (and a few settings). Used by the TUI's findings
panel and by `gpumix doctor` (exit 0 healthy, 1 warnings, 2 errors).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpumix.advice.field import field_findings, job_groups
from gpumix.advice.finding import SEVERITY_RANK, Finding
from gpumix.advice.probe_results import (
    KeptProbe,
    MeasuredFloor,
    age_text,
    kept_probe,
    measured_floor,
    probe_findings,
)
from gpumix.power.supplies import PowerLayout
from gpumix.power.tiers import tier_table
from gpumix.probe import store

__all__ = ["SEVERITY_RANK", "AdvisorSettings", "Finding", "exit_code", "findings"]
# Early drivers reported multi-4090 P2P as working while copies came out wrong (tinygrad notes,
# NVIDIA forum). The exact fixed version is not confirmed: a setting, not a truth.
DEFAULT_4090_P2P_MIN_DRIVER = "525.60.11"
COMM_SHARE_COSTLY = 0.30
LINK_SHARE_BUSY = 0.70
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


def _shared(topology: str | None) -> bool:
    return topology in SHARED_TOPOLOGY or (topology or "").startswith("NV")  # an NVLink bridge is closer still


def _off_main_root(snapshot: dict[str, Any]) -> list[Finding]:
    """GPUs that reach the others only across the system: behind the chipset or another socket."""
    count = len(snapshot["gpus"])
    if count < 3:
        return []
    level = {(link["gpu_a"], link["gpu_b"]): link["topology"] for link in snapshot["p2p"]}
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
        return []
    return [Finding("off-main-root", "warning", f"GPUs {', '.join(map(str, outside))} are behind the chipset or another socket",
                    f"they reach GPUs {', '.join(map(str, sorted(main)))} only across the system interconnect (SYS)",
                    "Their traffic to host memory shares the chipset's uplink: every all-reduce waits for it."
                    " Prefer CPU-attached slots for training GPUs.", outside)]


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


def _link_rate(gpu: dict[str, Any]) -> float | None:
    rate = gpu.get("pcie_link_bytes_per_s_max") or gpu.get("pcie_link_bytes_per_s_current")
    return float(rate) if isinstance(rate, int | float) and math.isfinite(rate) and rate > 0 else None


def _link_shares_while_communicating(ranks: list[dict[str, Any]], gpus: dict[str, dict[str, Any]],
                                     exposed_s: float, step_s: float, ring_prior: bool = True) -> dict[int, float]:
    """Per GPU of the job: the share of its link used while the all-reduce runs. Two estimates, the larger
    kept: NVML's average rate over the exposed share of the step (the counters average over the tick,
    and the traffic flows only while communicating), and the ring all-reduce's own traffic
    (2(R-1)/R x gradient bytes, where the agent reports them) over the exposed seconds: a prior, left
    out (ring_prior False) where the probe measured what the path delivers."""
    world = len(ranks)
    shares: dict[int, float] = {}
    for rank in ranks:
        gpu = gpus.get(rank.get("gpu_uuid"))
        if gpu is None:
            continue
        measured = max(gpu.get("pcie_rx_link_share") or 0.0, gpu.get("pcie_tx_link_share") or 0.0)
        share = measured / max(exposed_s / step_s, 1e-3) if measured else 0.0
        gradient, rate = rank.get("gradient_bytes"), _link_rate(gpu)
        if ring_prior and gradient and rate and world > 1:
            share = max(share, 2 * (world - 1) / world * gradient / exposed_s / rate)
        shares[gpu["index"]] = min(1.0, share)
    return shares


def _p2p_works_between(links: list[dict[str, Any]], indices: list[int]) -> bool:
    """Every pair of these GPUs reads P2P OK (NVML), so the host path was a setting, not the hardware."""
    ok = {frozenset((link["gpu_a"], link["gpu_b"])) for link in links or [] if link.get("read") == "OK"}
    pairs = [frozenset((a, b)) for n, a in enumerate(indices) for b in indices[n + 1:]]
    return bool(pairs) and all(pair in ok for pair in pairs)


def _cpu_forwarding(snapshot: dict[str, Any], kept: KeptProbe | None = None) -> list[Finding]:
    """From evidence, never from the host's CPU load: the all-reduce goes through host memory, its exposed
    time is a large share of the step, and a link (or host memory) runs near its limit while it does.
    Where a kept probe result measured the all-reduce floor over the job's GPUs, the job's all-reduce
    against that floor replaces the link prior."""
    links = snapshot["p2p"]
    found = []
    live = [r for r in snapshot.get("ranks", []) if r.get("connected")]
    for (name, run_id), members in sorted(job_groups(live).items(), key=lambda item: str(item[0])):
        job = name or run_id or "(unnamed)"
        shm_seen = any(str(c.get("transport") or "").upper().startswith("SHM")
                       for r in members for c in r.get("transport", []))
        p2p_off = any(r.get("env", {}).get("NCCL_P2P_DISABLE") == "1" for r in members)
        through_host = shm_seen or p2p_off or (links and all(link["read"] != "OK" for link in links))
        # The slowest rank waits for no one: its communication is the all-reduce's exposed time.
        # compute_s 0 is a figure (a step all exposed communication and data wait, as on real SHM ranks)
        slowest = max((r for r in members if r.get("compute_s") is not None and r.get("step_time_s")),
                      key=lambda r: r["compute_s"], default=None)
        if not through_host or len(members) < 2 or slowest is None or slowest.get("comm_share") is None:
            continue
        step_s, share = slowest["step_time_s"], slowest["comm_share"]
        exposed_s = share * step_s
        if share < COMM_SHARE_COSTLY or exposed_s <= 0:
            continue
        gpus = {g["uuid"]: g for g in snapshot["gpus"] if not g["lost"]}
        in_job = [gpus[r["gpu_uuid"]] for r in members if r.get("gpu_uuid") in gpus]
        floor = measured_floor(kept, [g["index"] for g in in_job])
        shares = _link_shares_while_communicating(members, gpus, exposed_s, step_s, ring_prior=floor is None)
        host = snapshot.get("host") or {}
        host_share = host.get("memory_bandwidth_share")  # where the hub knows host memory's limit
        host_busy = isinstance(host_share, int | float) and host_share >= LINK_SHARE_BUSY
        link_busy = bool(shares) and max(shares.values()) >= LINK_SHARE_BUSY
        floor_share = _share_of_floor(members, exposed_s, floor)
        floor_busy = floor_share is not None and floor_share >= LINK_SHARE_BUSY
        # P2P that works, not used: the host path is the bottleneck by choice (two H200s on NVLink with
        # NCCL_P2P_DISABLE=1: SHM's own 27 GB/s, no link or host memory near its limit, 77 % exposed)
        p2p_works = _p2p_works_between(links, [g["index"] for g in in_job])
        if not shares or not (link_busy or host_busy or p2p_works or floor_busy):
            continue
        # What paces it: the links at their limit while communicating; with none (host memory is
        # the limit), the slowest links, which every GPU's share of the ring waits for; with P2P
        # working, the host path itself, which every GPU of the job waits for. With the floor
        # measured, no link is guessed: the measured path paces every GPU of the job.
        pacing = sorted(i for i, s in shares.items() if s >= LINK_SHARE_BUSY)
        if not pacing and floor is None and (host_busy or not p2p_works):
            slowest_rate = min((rate for g in in_job if (rate := _link_rate(g))), default=None)
            pacing = sorted(g["index"] for g in in_job if slowest_rate and _link_rate(g) == slowest_rate)
        how = "NCCL's SHM transport seen by the probe" if shm_seen else (
            "NCCL_P2P_DISABLE=1" if p2p_off else "P2P unavailable between GPUs")
        listed = ", ".join(f"GPU {i} {100 * s:.0f} %" for i, s in sorted(shares.items(), key=lambda kv: -kv[1])[:6])
        by_index = {g["index"]: g for g in in_job}
        paced = ", ".join(f"GPU {i} ({by_index[i]['tier']}, gen{by_index[i]['pcie_gen_max']}"
                          f" x{by_index[i]['pcie_width_max']})" for i in pacing)
        evidence = (f"job {job}: the all-reduce goes through host memory ({how}); exposed communication"
                    f" {1000 * exposed_s:.0f} ms of a {1000 * step_s:.0f} ms step ({100 * share:.0f} %, rank"
                    f" {slowest['rank']}, which waits for no one); link shares while communicating: {listed}")
        if host_busy:
            evidence += f"; host memory at {100 * host_share:.0f} % of its bandwidth"
        if paced:
            evidence += f"; paced by the link{'s' if len(pacing) > 1 else ''} of {paced}"
        if floor is not None:
            evidence += _floor_evidence(floor, floor_share, [g["index"] for g in in_job])
        fix = ("Fewer, larger gradient buckets (DDP bucket_cap_mb), gradient accumulation (fewer all-reduces"
               " per sample), a compression hook (PowerSGD), wider CPU-attached slots for the slow links"
               " (or leave their GPUs out); and re-plan the batch split so fast cards do not wait.")
        if p2p_works:
            evidence += f"; yet P2P reads OK between GPUs {', '.join(str(g['index']) for g in in_job)}"
            fix = ("Let NCCL use P2P: unset NCCL_P2P_DISABLE (P2P reads OK here; `gpumix probe` checks its copies"
                   " byte for byte and measures the all-reduce both ways). " + fix)
        found.append(Finding("cpu-forwarding", "error" if share >= 2 * COMM_SHARE_COSTLY else "warning",
                             "All-reduce forwarded through the CPU is the bottleneck", evidence, fix,
                             pacing or sorted(g["index"] for g in in_job)))
    return found


def _share_of_floor(members: list[dict[str, Any]], exposed_s: float, floor: MeasuredFloor | None) -> float | None:
    """The job's all-reduce bus bandwidth (ring traffic of its gradient over the exposed seconds, as
    nccl-tests counts it) against the measured floor through host memory."""
    gradients = [r["gradient_bytes"] for r in members if isinstance(r.get("gradient_bytes"), int | float)
                 and math.isfinite(r["gradient_bytes"]) and r["gradient_bytes"] > 0]
    if floor is None or not gradients:
        return None
    world = len(members)
    return max(gradients) * 2 * (world - 1) / world / exposed_s / floor.host_bus_bytes_per_s


def _floor_evidence(floor: MeasuredFloor, floor_share: float | None, indices: list[int]) -> str:
    text = (f"; `gpumix probe` measured the all-reduce floor through host memory over GPUs"
            f" {', '.join(map(str, sorted(indices)))} at {floor.host_bus_bytes_per_s / 1e9:.1f} GB/s bus"
            f" ({floor.size_bytes / 2**20:.0f} MiB" + (f", {', '.join(floor.transports)}" if floor.transports else "")
            + f", {age_text(floor.age_s)} ago)")
    if floor_share is not None:
        text += f"; this job's all-reduce runs at {100 * floor_share:.0f} % of it"
    if floor.p2p_bus_bytes_per_s:
        text += f"; with P2P it measured {floor.p2p_bus_bytes_per_s / 1e9:.1f} GB/s bus"
    return text


def _tiers(snapshot: dict[str, Any]) -> list[Finding]:
    found = []
    for tier in tier_table(snapshot):
        if tier["flag"] is None:
            continue
        found.append(Finding(f"tier-{tier['flag']}", "warning",
                             f"{tier['tier']} tier is the {tier['flag']}" if tier["flag"] == "straggler"
                             else f"{tier['tier']} tier is underutilized",
                             tier["evidence"], "Options: " + "; ".join(tier["options"]) + ".", tier["gpus"]))
    return found


def findings(snapshot: dict[str, Any], settings: AdvisorSettings | None = None) -> list[Finding]:
    settings = settings or AdvisorSettings(has_infiniband=bool((snapshot.get("host") or {}).get("infiniband")))
    # Within a severity, what costs the job now comes first: the bottleneck and the tiers,
    # then settings and power, then the per-GPU link facts that explain them.
    kept = kept_probe(snapshot, settings.probe_folder, settings.probe_stale_after_s)
    result = [*_cpu_forwarding(snapshot, kept), *_tiers(snapshot), *_p2p(snapshot, settings),
              *_nccl_env(snapshot, settings), *_power(snapshot, settings),
              *field_findings(snapshot, settings.power_layout), *probe_findings(snapshot, kept), *_links(snapshot)]
    return sorted(result, key=lambda f: -SEVERITY_RANK[f.severity])  # stable: keeps that order


def exit_code(found: list[Finding]) -> int:
    return max((SEVERITY_RANK[f.severity] for f in found), default=0)
