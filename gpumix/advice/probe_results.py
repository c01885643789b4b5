"""Findings from a kept `gpumix probe` result, read from the store (the advisor never runs the probe):
a degraded slot, P2P copies that come back wrong, a shared uplink, and the measured all-reduce floor
that the CPU-forwarding finding cites. A kept result that no longer describes the box (other GPUs,
another driver, another link class, or older than the threshold) gives one note saying which, and
nothing else: its figures were true of something else.

Every figure is read again from the raw measurements and checked (finite, in range); no text of the
file reaches a finding but labels that pass gpumix.probe.store.safe_text."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumix.advice.finding import Finding
from gpumix.probe import store
from gpumix.probe.links import PROTOCOL_EFFICIENCY, SHARED_SHARE, SLOW_SHARE

MAX_RATE_BYTES_PER_S = 1e13  # 10 TB/s: above any link or memory; a larger figure is not a measurement
MAX_LISTED = 6
RERUN = ("Run `gpumix probe` again when the GPUs are idle (it takes up to 30 s and 1 GiB per GPU, and"
         " refuses GPUs another process is busy on unless --force).")
FIX_DEGRADED = ("Reseat the card, or move it to a full-width CPU-attached slot; check the riser (x1 mining"
                " risers and long extenders lose lanes or generation); check the BIOS's PCIe settings for"
                " that slot (generation, lane sharing with M.2 or bifurcation); then run `gpumix probe` again.")
FIX_WRONG_P2P = ("Set NCCL_P2P_DISABLE=1 for every rank now, and copy tensors between these GPUs through host"
                 " memory (tensor.to('cuda:N') goes peer to peer); then a driver that supports P2P on these"
                 " cards. A patched P2P driver needs Resizable BAR on and the IOMMU off (iommu=off or"
                 " amd_iommu=off, ACS disabled). Run `gpumix probe` again to check the copies byte for byte.")


@dataclass(frozen=True)
class KeptProbe:
    report: dict[str, Any]  # as gpumix.probe.store.checked gives it
    age_s: float
    stale: list[str]  # why it no longer describes the box; empty: it does
    index_of: dict[int, int]  # the probe's NVML index -> this snapshot's GPU index, by UUID


def kept_probe(snapshot: dict[str, Any], folder: Path | None, stale_after_s: float,
               now: float | None = None) -> KeptProbe | None:
    """The kept result that matches this box, else the newest that probed any of its GPUs (stale, with
    why), else None."""
    uuids = [gpu["uuid"] for gpu in snapshot.get("gpus", []) if isinstance(gpu.get("uuid"), str)]
    if folder is None or not uuids:
        return None
    candidates = store.kept_for(uuids, folder, now)
    if not candidates:
        return None
    judged = [(report, _mismatch(report, snapshot)) for report in candidates]
    report, reasons = next(((r, why) for r, why in judged if not why), judged[0])
    if report["age_s"] > stale_after_s:
        reasons = [*reasons, f"it was measured {age_text(report['age_s'])} ago, over the"
                             f" {age_text(stale_after_s)} after which a kept result counts as stale"]
    now_index = {gpu["uuid"]: gpu["index"] for gpu in snapshot["gpus"] if isinstance(gpu.get("uuid"), str)}
    index_of = {gpu["nvml_index"]: now_index[gpu["uuid"]] for gpu in report["machine"]["gpus"]
                if gpu["nvml_index"] is not None and gpu["uuid"] in now_index}
    return KeptProbe(report, report["age_s"], reasons, index_of)


def _mismatch(report: dict[str, Any], snapshot: dict[str, Any]) -> list[str]:
    """What changed since the probe: the driver, the GPUs (UUIDs, in order), each link's class."""
    reasons = []
    then_driver = report["machine"]["driver_version"]
    now_driver = store.safe_text((snapshot.get("driver") or {}).get("driver_version"))
    if then_driver != now_driver:
        reasons.append(f"the driver was {then_driver or '?'} then, {now_driver or '?'} now")
    then = report["machine"]["gpus"]
    now = [gpu for gpu in snapshot["gpus"] if isinstance(gpu.get("uuid"), str)]
    then_uuids, now_uuids = [g["uuid"] for g in then], [g["uuid"] for g in now]
    if then_uuids != now_uuids:
        new = [g["index"] for g in now if g["uuid"] not in then_uuids]
        gone = len([u for u in then_uuids if u not in now_uuids])
        parts = ([f"GPU{'s' if len(new) > 1 else ''} {', '.join(map(str, new))} not probed"] if new else []) + (
            [f"{gone} probed GPU{'s' if gone > 1 else ''} gone"] if gone else [])
        reasons.append("the GPUs are not the ones probed (" + ("; ".join(parts) or "in another order") + ")")
    by_uuid = {g["uuid"]: g for g in then}
    for gpu in now:
        old = by_uuid.get(gpu["uuid"])
        if old is not None and (old["pcie_gen_max"], old["pcie_width_max"]) != (gpu.get("pcie_gen_max"), gpu.get("pcie_width_max")):
            reasons.append(f"GPU {gpu['index']}'s link was gen{old['pcie_gen_max'] or '?'} x{old['pcie_width_max'] or '?'}"
                           f" then, gen{gpu.get('pcie_gen_max') or '?'} x{gpu.get('pcie_width_max') or '?'} now")
    return reasons


def age_text(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


def rate(value: Any) -> float | None:
    """A bandwidth from the file, or None: finite, positive, below anything a machine moves."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and 0 < value < MAX_RATE_BYTES_PER_S else None


def _gbs(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:.1f} GB/s"


def probe_findings(snapshot: dict[str, Any], kept: KeptProbe | None) -> list[Finding]:
    if kept is None:
        return []
    if kept.stale:
        return [Finding("probe-stale", "info", "Kept probe results are stale",
                        f"the kept `gpumix probe` result ({age_text(kept.age_s)} old) no longer describes this box: "
                        + "; ".join(kept.stale) + ". Its findings are not shown.", RERUN)]
    return [*_degraded_slots(snapshot, kept), *_wrong_copies(kept), *_shared_uplink(kept)]


def _degraded_slots(snapshot: dict[str, Any], kept: KeptProbe) -> list[Finding]:
    """The best pinned copy against what the GPU's link class carries (theoretical less 8 %)."""
    gpus = {gpu["index"]: gpu for gpu in snapshot["gpus"]}
    found = []
    for result in kept.report["gpus"]:
        index = kept.index_of.get(result["gpu"])
        gpu = gpus.get(index) if index is not None else None
        class_rate = rate(gpu.get("pcie_link_bytes_per_s_max")) if gpu else None
        h2d, d2h = rate(result.get("best_h2d_bytes_per_s")), rate(result.get("best_d2h_bytes_per_s"))
        delivered = max((r for r in (h2d, d2h) if r), default=None)
        if gpu is None or class_rate is None or delivered is None:
            continue
        expected = class_rate * PROTOCOL_EFFICIENCY
        if delivered >= SLOW_SHARE * expected:
            continue
        ran_at = store.safe_text(result.get("link_now"))
        found.append(Finding(
            "probe-degraded-slot", "warning", f"GPU {index}'s slot delivers far below its link class",
            f"`gpumix probe` ({age_text(kept.age_s)} ago) measured {_gbs(h2d) if h2d else 'N/A'} host→device and"
            f" {_gbs(d2h) if d2h else 'N/A'} device→host (pinned, best) on a PCIe gen{gpu.get('pcie_gen_max')}"
            f" x{gpu.get('pcie_width_max')} link that carries about {_gbs(expected)} ({100 * delivered / expected:.0f} %)"
            + (f"; the copies ran at PCIe gen{ran_at.partition('x')[0]} x{ran_at.partition('x')[2]}" if ran_at else ""),
            FIX_DEGRADED, [index]))
    return found


def _wrong_copies(kept: KeptProbe) -> list[Finding]:
    """A pattern that came back wrong peer to peer while right through host memory is P2P corrupting
    data; wrong both ways is the memory or the link."""
    p2p_wrong: list[str] = []
    both_wrong: list[str] = []
    gpus: set[int] = set()
    for pair in kept.report["pairs"]:
        directions = pair.get("directions")
        for direction in directions[:16] if isinstance(directions, list) else []:
            if not isinstance(direction, dict) or not isinstance(direction.get("checks"), dict):
                continue
            source, target = kept.index_of.get(direction.get("from")), kept.index_of.get(direction.get("to"))  # type: ignore[arg-type]
            direct, host = direction["checks"].get("direct"), direction["checks"].get("through_host")
            if source is None or target is None or not isinstance(direct, dict) or not isinstance(host, dict):
                continue
            differing = direct.get("differing_bytes")
            what = "zeros" if direct.get("all_zeros") is True else (
                f"{differing} wrong bytes" if isinstance(differing, int) and 0 < differing < 2**40 else "wrong bytes")
            if direct.get("correct") is False and host.get("correct") is True:
                p2p_wrong.append(f"GPU {source} → GPU {target} came back as {what}")
                gpus |= {source, target}
            elif host.get("correct") is False:
                both_wrong.append(f"GPU {source} → GPU {target}")
                gpus |= {source, target}
    driver = kept.report["machine"]["driver_version"] or "unknown"
    found = []
    if p2p_wrong:
        found.append(Finding(
            "probe-p2p-wrong", "error", "P2P copies between GPUs come back wrong",
            f"`gpumix probe` ({age_text(kept.age_s)} ago) copied a known 4 MiB pattern peer to peer and through"
            f" host memory: {'; '.join(p2p_wrong[:MAX_LISTED])}, while the copy through host memory was right;"
            f" driver {driver}", FIX_WRONG_P2P, sorted(gpus)))
    if both_wrong:
        found.append(Finding(
            "probe-copy-wrong", "error", "Copies between GPUs are wrong even through host memory",
            f"`gpumix probe` ({age_text(kept.age_s)} ago): {'; '.join(both_wrong[:MAX_LISTED])} wrong through"
            f" host memory as well; driver {driver}",
            "Run a GPU memory test on these cards and check their risers; do not train on them until"
            " `gpumix probe` copies right.", sorted(gpus)))
    return found


def _shared_uplink(kept: KeptProbe) -> list[Finding]:
    together = kept.report["together"]
    if not together:
        return []
    aggregate, total = rate(together.get("aggregate_bytes_per_s")), rate(together.get("sum_of_singles_bytes_per_s"))
    probed = together.get("gpus") if isinstance(together.get("gpus"), list) else []
    indices = sorted({kept.index_of[i] for i in probed[:1024] if isinstance(i, int) and i in kept.index_of})
    if not aggregate or not total or len(indices) < 2 or aggregate >= SHARED_SHARE * total:
        return []
    return [Finding(
        "probe-shared-uplink", "warning", f"GPUs {', '.join(map(str, indices))} share an uplink",
        f"`gpumix probe` ({age_text(kept.age_s)} ago): host→device copies to GPUs {', '.join(map(str, indices))}"
        f" all at once moved {_gbs(aggregate)}, {100 * aggregate / total:.0f} % of the {_gbs(total)} they move"
        " one at a time: a chipset, a PCIe switch or one CPU socket carries them all",
        "Spread the cards over CPU-attached slots (the board manual's block diagram says which slots hang"
        " off the chipset); until then an all-reduce through host memory is bound by that uplink.", indices)]


@dataclass(frozen=True)
class MeasuredFloor:
    host_bus_bytes_per_s: float  # NCCL all-reduce bus bandwidth with NCCL_P2P_DISABLE=1
    p2p_bus_bytes_per_s: float | None  # and with P2P allowed, where it ran
    size_bytes: float
    transports: list[str]  # NCCL's own words for the host path, e.g. SHM/direct/direct
    age_s: float


def measured_floor(kept: KeptProbe | None, job_gpus: list[int]) -> MeasuredFloor | None:
    """The all-reduce floor measured over exactly these GPUs, from a kept result that still describes
    the box; None otherwise (the advisor then falls back on the link prior)."""
    if kept is None or kept.stale or not kept.report["allreduce"]:
        return None
    floor = kept.report["allreduce"]
    probed = floor.get("gpus") if isinstance(floor.get("gpus"), list) else []
    if sorted(kept.index_of.get(i, -1) for i in probed[:1024] if isinstance(i, int)) != sorted(job_gpus):
        return None
    runs = [run for run in floor.get("runs", [])[:4] if isinstance(run, dict)] if isinstance(floor.get("runs"), list) else []
    host = next((run for run in runs if run.get("p2p_disabled") is True), {})
    p2p = next((run for run in runs if run.get("p2p_disabled") is False), {})
    host_bus, size = rate(host.get("bus_bytes_per_s")), rate(host.get("size_bytes"))
    if host_bus is None or size is None:
        return None
    raw = host.get("transports") if isinstance(host.get("transports"), list) else []
    transports = [text for t in raw[:4] if (text := store.safe_text(t))]
    return MeasuredFloor(host_bus, rate(p2p.get("bus_bytes_per_s")), size, transports, kept.age_s)


def job_allreduce_floor(snapshot: dict[str, Any], job: str, folder: Path | None = None) -> tuple[float, str] | None:
    """The planner's all-reduce input from a kept `gpumix probe` result measured over exactly the job's
    GPUs, through host memory (NCCL_P2P_DISABLE=1, the path the link prior models), with what it is;
    None without one that still describes the box (the planner then uses the link prior). One place
    for `gpumix plan` and the monitor's split, so both predict alike."""
    index_of = {gpu["uuid"]: gpu["index"] for gpu in snapshot["gpus"]}
    job_gpus = sorted(index_of[r["gpu_uuid"]] for r in snapshot.get("ranks", [])
                      if r.get("job") == job and r.get("connected") and r.get("gpu_uuid") in index_of)
    floor = measured_floor(kept_probe(snapshot, folder or store.state_dir(), store.STALE_S), job_gpus)
    if floor is None:
        return None
    return floor.host_bus_bytes_per_s, (f"measured all-reduce floor: {floor.host_bus_bytes_per_s / 1e9:.1f} GB/s bus"
                                        f" through host memory over these GPUs (gpumix probe, {age_text(floor.age_s)} ago)")
