"""A split's predicted power draw against every budget the machine declares (issue 16, item 5).

A card in synchronous data-parallel training draws about its idle power plus a load term in
proportion to the share of the step it computes (it idles while it waits for the slowest rank).
A balanced split makes every card busy, so a re-plan at stock caps can raise the box's draw past its
budget (the demo rig: Σ 2899 W against 2800 W after `s`), and a card whose draw would pass its cap is
held at the cap (NVML's `pwr` throttle) and runs slower than the split predicted.

Per card: draw = idle + k x busy share, k from the draw and busy share measured now, the idle draw a
prior (IDLE_SHARE_PRIOR of its default limit); at most its cap. A card drawing at its cap now, or
with no measured share, is predicted at its cap (its load term is unknown: the safe side). The
budgets: the machine's total GPU budget and each supply and circuit (gpumix.power.supplies, headroom
taken off). Pure functions of a snapshot and a plan's JSON (gpumix.plan.plan_json).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpumix.power.supplies import LayoutError, budgets, layout_from_json

IDLE_SHARE_PRIOR = 0.08  # of the default limit: a GeForce card idles at ~20-35 W (assumed, not measured)
AT_CAP_SHARE = 0.98  # a draw this close to the cap is taken as held by it
IDLE_PRIOR = f"idle draw prior: {IDLE_SHARE_PRIOR:.0%} of the default limit"


@dataclass(frozen=True)
class GpuDraw:
    index: int
    cap_w: float
    draw_now_w: float | None
    predicted_w: float
    at_cap: bool  # the split would newly hold it at its cap: slower than its speed measured below the cap
    basis: str  # what the prediction stands on

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "cap_w": self.cap_w, "draw_now_w": self.draw_now_w,
                "predicted_w": self.predicted_w, "at_cap": self.at_cap, "basis": self.basis}


def _number(value: Any) -> float | None:
    """A finite, non-negative number from a plan or snapshot, else None (an int too large for a float too)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def predict_gpu_draw(index: int, cap_w: float, default_w: float, draw_now_w: float | None,
                     busy_now: float | None, busy_after: float | None) -> GpuDraw:
    """One card's draw at a busy share `busy_after` (None: no rank after the split, it idles)."""
    idle_w = min(cap_w, IDLE_SHARE_PRIOR * default_w)
    if busy_after is None or busy_after <= 0:
        return GpuDraw(index, cap_w, draw_now_w, idle_w, False, "no work in the split: " + IDLE_PRIOR)
    if draw_now_w is None or not busy_now or draw_now_w >= AT_CAP_SHARE * cap_w:
        # at its cap now: its measured speed is the capped one already (no warning); unmeasured: the safe side
        why = "drawing at its cap now" if draw_now_w is not None and busy_now else "no draw and busy share measured"
        return GpuDraw(index, cap_w, draw_now_w, cap_w, False, f"{why}: predicted at its cap")
    per_share_w = max(0.0, draw_now_w - idle_w) / busy_now
    demand_w = idle_w + per_share_w * busy_after
    basis = f"measured {draw_now_w:.0f} W at {100 * busy_now:.0f} % busy, {IDLE_PRIOR}"
    return GpuDraw(index, cap_w, draw_now_w, min(cap_w, demand_w), demand_w > cap_w, basis)


def draw_against_budgets(snapshot: dict[str, Any], plan: dict[str, Any],
                         budget_w: float | None = None) -> dict[str, Any]:
    """The split `plan` (plan_to_json's form) on this machine as the snapshot shows it (caps in force,
    draw and ranks now): each card's predicted draw, the total, each declared budget's predicted load
    against its usable limit, and `warning`: one line when the split would pass a budget or hold a
    card at its cap, else None. `budget_w`: the total budget, else the snapshot's."""
    gpus = {g["uuid"]: g for g in snapshot.get("gpus") or [] if not g.get("lost")}
    ranks_now = {r["gpu_uuid"]: r for r in snapshot.get("ranks") or [] if r.get("connected") and r.get("gpu_uuid")}
    step_after = _number((plan.get("proposed") or {}).get("step_time_s"))
    busy_after: dict[str, float] = {}
    for rank in plan.get("ranks") or []:
        compute = _number(rank.get("predicted_compute_s"))
        if rank.get("gpu_uuid") in gpus and compute is not None and step_after:
            busy_after[rank["gpu_uuid"]] = busy_after.get(rank["gpu_uuid"], 0.0) + min(1.0, compute / step_after)
    planned = {r.get("gpu_uuid") for r in plan.get("ranks") or []}
    rows, unread = [], []
    for uuid, gpu in gpus.items():
        cap, default = _number(gpu.get("power_cap_w")), _number(gpu.get("power_limit_default_w"))
        if cap is None or default is None:  # no prediction stands without them: said, not silently dropped
            unread.append(str(gpu["index"]))
            continue
        draw_now = _number(gpu.get("power_w"))
        if uuid not in planned:  # not in this job: it goes on as it is
            rows.append(GpuDraw(gpu["index"], cap, draw_now, draw_now if draw_now is not None else cap, False,
                                "not in the job: its draw now" if draw_now is not None else "not in the job: its cap"))
            continue
        rank = ranks_now.get(uuid) or {}
        compute_now, step_now = _number(rank.get("compute_s")), _number(rank.get("step_time_s"))
        busy_now = min(1.0, compute_now / step_now) if compute_now is not None and step_now else None
        rows.append(predict_gpu_draw(gpu["index"], cap, default, draw_now, busy_now, busy_after.get(uuid)))
    predicted = {row.index: row.predicted_w for row in rows}
    total_budget = _number(budget_w) if budget_w is not None else _number(snapshot.get("power_budget_w"))
    limits = []
    if total_budget:
        limits.append({"kind": "total", "name": "GPU budget", "limit_w": total_budget, "usable_w": total_budget,
                       "predicted_w": sum(predicted.values())})
    try:
        layout = layout_from_json(snapshot.get("power_layout"), len(snapshot.get("gpus") or []))
    except LayoutError:
        layout = None
    if layout is not None:
        for budget in budgets(layout):
            limits.append({"kind": budget.kind, "name": budget.name, "limit_w": budget.limit_w,
                           "usable_w": budget.limit_w * (1.0 - layout.headroom), "predicted_w": budget.load_w(predicted)})
    for limit in limits:
        limit["over"] = limit["predicted_w"] > limit["usable_w"] + 1e-6
    return {"gpus": [row.to_json() for row in sorted(rows, key=lambda r: r.index)],
            "predicted_total_w": sum(predicted.values()),
            "draw_now_total_w": sum(row.draw_now_w or 0.0 for row in rows),
            "budgets": limits, "warning": _warning(limits, rows, unread)}


def _warning(limits: list[dict[str, Any]], rows: list[GpuDraw], unread: list[str]) -> str | None:
    over = [f"{lim['name']} {lim['predicted_w']:.0f} W > {lim['usable_w']:.0f} W" for lim in limits if lim["over"]]
    capped = [str(row.index) for row in rows if row.at_cap]
    parts = []
    if over:
        parts.append("predicted draw exceeds " + ", ".join(over) + ": fit the caps (power fit) before applying")
    if capped:
        parts.append(f"GPU {','.join(capped)} would run at {'its' if len(capped) == 1 else 'their'} cap:"
                     " slower than this prediction")
    if unread:
        parts.append(f"GPU {','.join(unread)}: cap not read, {'its' if len(unread) == 1 else 'their'} draw is not"
                     " in these totals")
    return "; ".join(parts) or None
