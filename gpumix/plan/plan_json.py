"""A plan as JSON (gpumix plan --json, the TUI's split screen, auto re-plan's log)."""

from __future__ import annotations

import math
from typing import Any

from gpumix.plan.split_types import Plan, Prediction


def _prediction_json(p: Prediction) -> dict[str, float]:
    return {"step_time_s": p.step_time_s, "compute_s": p.compute_s,
            "allreduce_s": p.allreduce_s, "samples_per_s": p.samples_per_s}


def plan_to_json(p: Plan) -> dict[str, Any]:
    fast = None
    if p.fast_tier_only is not None:
        alt = p.fast_tier_only
        fast = {"tier": alt.tier, "ranks": list(alt.ranks), **_prediction_json(alt.prediction),
                "speedup_over_current": (alt.prediction.samples_per_s / p.current.samples_per_s
                                         if p.current.samples_per_s > 0 else None)}
    return {
        "global_batch": p.global_batch,
        "ranks": [
            {"rank": r.rank, "gpu_uuid": r.gpu_uuid, "samples": r.samples,
             "micro_batch": r.micro_batch, "accumulation_steps": r.accumulation_steps,
             "n_r": r.samples, "m_r": r.micro_batch, "k_r": r.accumulation_steps,  # the math's names
             "loss_weight": r.loss_weight, "limited_by": list(r.limited_by) or None,
             "predicted_compute_s": r.compute_s}
            for r in p.ranks
        ],
        "current": _prediction_json(p.current),
        "proposed": _prediction_json(p.proposed),
        "ideal": _prediction_json(p.ideal),
        "speedup": p.speedup if math.isfinite(p.speedup) else None,  # None: nothing runs now
        "kept_current": p.kept_current,
        "interpolated": p.interpolated,  # every count within its rank's measured ones (plan.interpolation)
        "note": p.note,
        "fast_tier_only": fast,
        "basis": {"compute": [{"rank": rank, **basis.to_json()} for rank, basis in p.compute_basis],
                  "communication": p.comm_basis.to_json() if p.comm_basis else None},
        "without_tier": None if p.best_without_tier is None else {
            "tier_left_out": p.best_without_tier.tier, "ranks": list(p.best_without_tier.ranks),
            **_prediction_json(p.best_without_tier.prediction),
            "speedup_over_current": (p.best_without_tier.prediction.samples_per_s / p.current.samples_per_s
                                     if p.current.samples_per_s > 0 else None)},
    }
