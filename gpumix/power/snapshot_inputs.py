"""The power fit's input from a hub snapshot: each card's caps and ranges, its rank's compute time, and
the power curve learned from the caps it (or a card of its model) ran at (`power_points`)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from gpumix.power.budget import MAX_POWER_POINTS, GpuPower, same_cap

# What a card's fit needs read, and its name in a refusal: a card missing one is left out of the sum
_POWER_FIELDS = (("power_cap_w", "power cap"), ("power_limit_default_w", "default power limit"),
                 ("power_limit_min_w", "minimum power limit"), ("power_limit_max_w", "maximum power limit"))


def unread_cap(snapshot: dict[str, Any]) -> str | None:
    """Why no fit can be held to a budget now, or None: a GPU on the bus whose cap or limits did not read
    (a failed or unsupported NVML call) would be left out of the sum (gpu_power_from_snapshot skips it),
    and the caps fitted to the rest could then draw past the budget with it."""
    for gpu in snapshot.get("gpus") or []:
        if gpu.get("lost"):
            continue
        for field, what in _POWER_FIELDS:
            if gpu.get(field) is None:
                return f"GPU {gpu.get('index')}'s {what} could not be read: the fit cannot hold the budget without it"
    return None


def gpu_power_from_snapshot(snapshot: dict[str, Any]) -> list[GpuPower]:
    """The fit's input from a hub snapshot (caps, ranges, and the ranks' compute times). Where the hub
    adds `power_points` (uuid -> compute at each cap seen, gpumix.hub.cap_samples), each card's power
    curve is learned from its own caps at its split, else from another card of its model measured at
    two caps or more (relative times, scaled to this card), else the prior."""
    ranks = {r["gpu_uuid"]: r for r in snapshot.get("ranks", []) if r.get("connected") and r.get("compute_s")}
    # The slowest rank waits for no one: its communication time is the all-reduce itself.
    allreduce_s = min((r["step_time_s"] - r["compute_s"] for r in ranks.values() if r.get("step_time_s")), default=0.0)
    result = []
    for gpu in snapshot["gpus"]:
        if gpu["lost"] or any(gpu[field] is None for field, _ in _POWER_FIELDS):  # unread_cap says which
            continue
        rank = ranks.get(gpu["uuid"])
        result.append(GpuPower(
            index=gpu["index"], uuid=gpu["uuid"], tier=gpu["tier"], cap_w=gpu["power_cap_w"],
            default_w=gpu["power_limit_default_w"], min_w=gpu["power_limit_min_w"], max_w=gpu["power_limit_max_w"],
            compute_s=rank["compute_s"] if rank else None, comm_s=max(0.0, allreduce_s) if rank else 0.0,
        ))
    measured = snapshot.get("power_points")
    if not isinstance(measured, dict) or not measured:
        return result
    samples = {uuid: rank.get("samples") for uuid, rank in ranks.items()}
    own = {g.index: _own_points(g, measured.get(g.uuid), samples.get(g.uuid)) for g in result}
    return [_with_points(g, own, result) for g in result]


def _own_points(gpu: GpuPower, rows: Any, samples: Any) -> list[tuple[float, float, float | None]]:
    """(cap W, compute s, age s) this card measured at the split it runs now (caps other than its own
    current one: that is the rank's live figure)."""
    if not isinstance(rows, list) or samples is None:
        return []
    points = []
    for row in rows:
        if not isinstance(row, dict) or row.get("samples") != round(samples):
            continue
        cap_w, compute_s, age_s = row.get("cap_w"), row.get("compute_s"), row.get("age_s")
        if (_finite(cap_w) and _finite(compute_s) and compute_s > 0 and gpu.min_w - 1 <= cap_w <= gpu.max_w + 1
                and not same_cap(cap_w, gpu.cap_w)):
            points.append((float(cap_w), float(compute_s), float(age_s) if _finite(age_s) else None))
    return points[:MAX_POWER_POINTS]


def _with_points(gpu: GpuPower, own: dict[int, list[tuple[float, float, float | None]]],
                 gpus: list[GpuPower]) -> GpuPower:
    if gpu.compute_s is None:
        return gpu
    mine = own[gpu.index]
    if mine:  # its own caps: the current one and these make a learned curve
        return replace(gpu, power_points=tuple((c, t) for c, t, _ in mine),
                       power_point_ages_s=tuple(a for _, _, a in mine))
    # Another card of this model, measured at this card's cap and one more at least: its times relative to
    # that cap, scaled to this card's compute now (same model, same workload: the same curve's shape).
    for other in gpus:
        theirs = own[other.index]
        if (other.index == gpu.index or other.tier != gpu.tier or other.compute_s is None or not theirs
                or not same_cap(other.cap_w, gpu.cap_w)):
            continue
        scale = gpu.compute_s / other.compute_s
        return replace(gpu, power_points=tuple((c, t * scale) for c, t, _ in theirs),
                       power_point_ages_s=tuple(a for _, _, a in theirs), learned_from=f"GPU {other.index} (same model)")
    return gpu


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
