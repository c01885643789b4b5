"""GPU tiers: cards of one model and VRAM, and how each tier fares in the job.

A fast rank waits in the all-reduce for the slowest one; the share of each
step it waits is (slowest compute - its compute) / step time. A tier that
waits a large share is underutilized; a tier holding the others back is the
straggler. Pure functions of a snapshot.
"""

from __future__ import annotations

import statistics
from typing import Any

from gpumix.wire.jobs import ranks_by_job

UNDERUSED_WAIT_SHARE = 0.30  # a tier that waits this share of every step is underutilized

OPTIONS_UNDERUSED = [
    "re-plan the batch split so this tier takes a larger share (gpumix plan)",
    "lower its power cap: a waiting card burns watts for nothing (gpumix power fit)",
]
OPTIONS_STRAGGLER = [
    "re-plan the batch split so this tier takes a smaller share (gpumix plan)",
    "take it out of the training job (eval or serving), as owners of such rigs often do",
]


def wait_shares(ranks: list[dict[str, Any]]) -> dict[int, float]:
    """Each live rank's wait for the slowest rank of its own job, as a share of its step (0-1),
    keyed by id() of the rank's dict: rank numbers repeat across jobs."""
    shares = {}
    for members in ranks_by_job(ranks).values():
        live = [r for r in members if r.get("connected") and r.get("compute_s") is not None and r.get("step_time_s")]
        if not live:
            continue
        slowest = max(r["compute_s"] for r in live)
        shares.update({id(r): min(1.0, max(0.0, (slowest - r["compute_s"]) / r["step_time_s"])) for r in live})
    return shares


def tier_table(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    ranks = snapshot.get("ranks", [])
    waits = wait_shares(ranks)
    by_uuid: dict[str, list[dict[str, Any]]] = {}
    for rank in ranks:
        if rank.get("connected"):
            by_uuid.setdefault(rank.get("gpu_uuid") or "", []).append(rank)
    tiers: dict[str, list[dict[str, Any]]] = {}
    for gpu in snapshot["gpus"]:
        tiers.setdefault(gpu["tier"], []).append(gpu)
    table = []
    for name, gpus in tiers.items():
        tier_ranks = [r for gpu in gpus for r in by_uuid.get(gpu["uuid"], [])]
        utils = [g["util_gpu_pct"] for g in gpus if g["util_gpu_pct"] is not None]
        rates = [r["samples_per_s"] for r in tier_ranks if r.get("samples_per_s") is not None]
        tier_waits = [waits[id(r)] for r in tier_ranks if id(r) in waits]
        wait = statistics.median(tier_waits) if tier_waits else None
        straggler = any(r.get("straggler") for r in tier_ranks)
        underused = wait is not None and wait >= UNDERUSED_WAIT_SHARE and not straggler
        evidence = []
        if straggler:
            slow = [r for r in tier_ranks if r.get("straggler")]
            evidence.append(f"ranks {', '.join(str(r['rank']) for r in slow)} compute "
                            f"{statistics.median(r['compute_s'] for r in slow):.3f} s per step, the others wait for them")
        if underused:
            evidence.append(f"its ranks wait {100 * wait:.0f} % of every step for the slowest rank")
        table.append({
            "tier": name,
            "gpus": [g["index"] for g in gpus],
            "count": len(gpus),
            "util_mean_pct": statistics.fmean(utils) if utils else None,
            "power_w": sum(g["power_w"] or 0.0 for g in gpus),
            "power_cap_w": sum(g["power_cap_w"] or 0.0 for g in gpus),
            "ranks": [r["rank"] for r in tier_ranks],
            "samples_per_s": sum(rates) if rates else None,
            "wait_share": wait,
            "flag": "straggler" if straggler else ("underutilized" if underused else None),
            "evidence": "; ".join(evidence),
            "options": OPTIONS_STRAGGLER if straggler else (OPTIONS_UNDERUSED if underused else []),
        })
    return table
