"""The all-reduce forwarded through the CPU as a job's bottleneck: the finding, from evidence only.

Never from the host's CPU load: the all-reduce goes through host memory, its exposed time is a large
share of the step, and a link (or host memory, or the measured all-reduce floor) runs near its limit
while it does; or P2P reads OK and is not used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpumix.advice.field import job_groups
from gpumix.advice.finding import Finding
from gpumix.advice.probe_results import KeptProbe, MeasuredFloor, age_text, measured_floor

COMM_SHARE_COSTLY = 0.30
LINK_SHARE_BUSY = 0.70


def cpu_forwarding_findings(snapshot: dict[str, Any], kept: KeptProbe | None = None) -> list[Finding]:
    """One finding per job whose all-reduce through host memory is its bottleneck. Where a kept probe
    result measured the all-reduce floor over the job's GPUs, the job's all-reduce against that floor
    replaces the link prior."""
    live = [r for r in snapshot.get("ranks", []) if r.get("connected")]
    found = []
    for (name, run_id), members in sorted(job_groups(live).items(), key=lambda item: str(item[0])):
        finding = _job_finding(name or run_id or "(unnamed)", members, snapshot, kept)
        if finding is not None:
            found.append(finding)
    return found


@dataclass(frozen=True)
class _Evidence:
    """What one job's finding cites."""

    job: str
    how: str  # why the all-reduce goes through host memory
    slowest: dict[str, Any]  # the rank that waits for no one
    step_s: float
    share: float  # of its step, exposed communication
    shares: dict[int, float]  # per GPU: its link's share while communicating
    in_job: list[dict[str, Any]]
    pacing: list[int]
    host_share: float | None  # host memory's share of its bandwidth, where near its limit
    floor: MeasuredFloor | None
    floor_share: float | None
    p2p_works: bool


def _through_host(members: list[dict[str, Any]], links: list[dict[str, Any]]) -> str | None:
    """How the job's all-reduce goes through host memory, or None when nothing says it does."""
    shm_seen = any(str(c.get("transport") or "").upper().startswith("SHM")
                   for r in members for c in r.get("transport", []))
    p2p_off = any(r.get("env", {}).get("NCCL_P2P_DISABLE") == "1" for r in members)
    if not (shm_seen or p2p_off or (links and all(link["read"] != "OK" for link in links))):
        return None
    return "NCCL's SHM transport seen by the probe" if shm_seen else (
        "NCCL_P2P_DISABLE=1" if p2p_off else "P2P unavailable between GPUs")


def _costly_rank(members: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The slowest rank, where its exposed communication is a costly share of its step. It waits for
    no one: its communication is the all-reduce's exposed time. compute_s 0 is a figure (a step all
    exposed communication and data wait, as on real SHM ranks)."""
    slowest = max((r for r in members if r.get("compute_s") is not None and r.get("step_time_s")),
                  key=lambda r: r["compute_s"], default=None)
    if len(members) < 2 or slowest is None or slowest.get("comm_share") is None:
        return None
    share = slowest["comm_share"]
    if share < COMM_SHARE_COSTLY or share * slowest["step_time_s"] <= 0:
        return None
    return slowest


def _job_finding(job: str, members: list[dict[str, Any]], snapshot: dict[str, Any],
                 kept: KeptProbe | None) -> Finding | None:
    links = snapshot["p2p"]
    how = _through_host(members, links)
    slowest = _costly_rank(members) if how is not None else None
    if how is None or slowest is None:
        return None
    step_s, share = slowest["step_time_s"], slowest["comm_share"]
    exposed_s = share * step_s
    gpus = {g["uuid"]: g for g in snapshot["gpus"] if not g["lost"]}
    in_job = [gpus[r["gpu_uuid"]] for r in members if r.get("gpu_uuid") in gpus]
    floor = measured_floor(kept, [g["index"] for g in in_job])
    shares = _link_shares_while_communicating(members, gpus, exposed_s, step_s, ring_prior=floor is None)
    host_share = (snapshot.get("host") or {}).get("memory_bandwidth_share")  # where the hub knows host memory's limit
    host_busy = isinstance(host_share, int | float) and host_share >= LINK_SHARE_BUSY
    link_busy = bool(shares) and max(shares.values()) >= LINK_SHARE_BUSY
    floor_share = _share_of_floor(members, exposed_s, floor)
    floor_busy = floor_share is not None and floor_share >= LINK_SHARE_BUSY
    # P2P that works, not used: the host path is the bottleneck by choice (two H200s on NVLink with
    # NCCL_P2P_DISABLE=1: SHM's own 27 GB/s, no link or host memory near its limit, 77 % exposed)
    p2p_works = _p2p_works_between(links, [g["index"] for g in in_job])
    if not shares or not (link_busy or host_busy or p2p_works or floor_busy):
        return None
    pacing = _pacing(shares, in_job, floor is not None, host_busy, p2p_works)
    return _finding(_Evidence(job, how, slowest, step_s, share, shares, in_job, pacing,
                              host_share if host_busy else None, floor, floor_share, p2p_works))


def _pacing(shares: dict[int, float], in_job: list[dict[str, Any]], floor_measured: bool, host_busy: bool,
            p2p_works: bool) -> list[int]:
    """What paces it: the links at their limit while communicating; with none (host memory is the
    limit), the slowest links, which every GPU's share of the ring waits for; with P2P working, the
    host path itself, which every GPU of the job waits for. With the floor measured, no link is
    guessed: the measured path paces every GPU of the job."""
    pacing = sorted(i for i, s in shares.items() if s >= LINK_SHARE_BUSY)
    if not pacing and not floor_measured and (host_busy or not p2p_works):
        slowest_rate = min((rate for g in in_job if (rate := _link_rate(g))), default=None)
        pacing = sorted(g["index"] for g in in_job if slowest_rate and _link_rate(g) == slowest_rate)
    return pacing


def _finding(e: _Evidence) -> Finding:
    exposed_s = e.share * e.step_s
    listed = ", ".join(f"GPU {i} {100 * s:.0f} %" for i, s in sorted(e.shares.items(), key=lambda kv: -kv[1])[:6])
    by_index = {g["index"]: g for g in e.in_job}
    paced = ", ".join(f"GPU {i} ({by_index[i]['tier']}, gen{by_index[i]['pcie_gen_max']}"
                      f" x{by_index[i]['pcie_width_max']})" for i in e.pacing)
    evidence = (f"job {e.job}: the all-reduce goes through host memory ({e.how}); exposed communication"
                f" {1000 * exposed_s:.0f} ms of a {1000 * e.step_s:.0f} ms step ({100 * e.share:.0f} %, rank"
                f" {e.slowest['rank']}, which waits for no one); link shares while communicating: {listed}")
    if e.host_share is not None:
        evidence += f"; host memory at {100 * e.host_share:.0f} % of its bandwidth"
    if paced:
        evidence += f"; paced by the link{'s' if len(e.pacing) > 1 else ''} of {paced}"
    if e.floor is not None:
        evidence += _floor_evidence(e.floor, e.floor_share, [g["index"] for g in e.in_job])
    fix = ("Fewer, larger gradient buckets (DDP bucket_cap_mb), gradient accumulation (fewer all-reduces"
           " per sample), a compression hook (PowerSGD), wider CPU-attached slots for the slow links"
           " (or leave their GPUs out); and re-plan the batch split so fast cards do not wait.")
    if e.p2p_works:
        evidence += f"; yet P2P reads OK between GPUs {', '.join(str(g['index']) for g in e.in_job)}"
        fix = ("Let NCCL use P2P: unset NCCL_P2P_DISABLE (P2P reads OK here; `gpumix probe` checks its copies"
               " byte for byte and measures the all-reduce both ways). " + fix)
    return Finding("cpu-forwarding", "error" if e.share >= 2 * COMM_SHARE_COSTLY else "warning",
                   "All-reduce forwarded through the CPU is the bottleneck", evidence, fix,
                   e.pacing or sorted(g["index"] for g in e.in_job))


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

