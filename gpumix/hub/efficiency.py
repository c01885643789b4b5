"""The heterogeneity-efficiency headline: what a mixed box achieves against what its GPUs could.

The bound is the sum of each GPU's isolated throughput at its micro-batch: the samples/s it computes
alone (samples / compute seconds, no waiting, no all-reduce). HetHub reports 97.5 % of such a bound.
Beside the run's share of it, the same share for the two usual alternatives, predicted from the same
measurements: the equal split (every rank B/R samples at its own isolated rate) and the fast tier
alone (B over the fastest tier's GPUs, the rest idle), each paying the communication measured now.
Pure; the hub adds it to each run (snapshot["run"]["efficiency"]).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from gpumix.wire.jobs import ranks_by_job


def _positive(value: Any) -> float | None:
    if type(value) is float:  # the usual figure: one test (NaN fails it, inf - inf is NaN)
        return value if value > 0 and value - value == 0.0 else None
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def run_efficiency(ranks: list[dict[str, Any]], tier_of: dict[str, str]) -> dict[str, Any] | None:
    """The run's achieved samples/s as a share of its GPUs' isolated sum, and the equal split's and
    the fast tier's; None until every live rank reports samples and compute time."""
    live = [r for r in ranks if r.get("connected") and _positive(r.get("step_time_s"))]
    rates, samples = [], []
    for rank in live:
        n, compute_s = _positive(rank.get("samples")), _positive(rank.get("compute_s"))
        if n is None or compute_s is None:
            return None
        rates.append(n / compute_s)
        samples.append(n)
    if not live:
        return None
    bound = sum(rates)
    batch = sum(samples)
    step_s = max(r["step_time_s"] for r in live)
    comm_s = max(0.0, step_s - max(r["compute_s"] for r in live))  # what the step waits for beyond compute
    achieved = batch / step_s
    equal_s = max(batch / len(live) / rate for rate in rates) + comm_s
    by_tier: dict[str, list[float]] = {}
    for rank, rate in zip(live, rates, strict=True):
        by_tier.setdefault(tier_of.get(rank.get("gpu_uuid") or "", "?"), []).append(rate)
    fast_tier, fast_rates = max(by_tier.items(), key=lambda item: statistics.median(item[1]))
    fast_s = batch / sum(fast_rates) + (comm_s if len(fast_rates) > 1 else 0.0)
    return {
        "share": min(1.0, achieved / bound),
        "bound_samples_per_s": bound,
        "achieved_samples_per_s": achieved,
        "equal_split_share": min(1.0, batch / equal_s / bound),
        "fast_tier_only_share": min(1.0, batch / fast_s / bound) if len(by_tier) > 1 else None,
        "fast_tier": fast_tier if len(by_tier) > 1 else None,
    }


def add_efficiency(runs: dict[str, dict[str, Any]], ranks: list[dict[str, Any]], gpus: list[dict[str, Any]],
                   groups: dict[str, list[dict[str, Any]]] | None = None) -> None:
    """Each run summary (snapshot["runs"], and with it snapshot["run"]) gets its "efficiency".
    `groups`: ranks_by_job(ranks), where the caller has it."""
    members = ranks_by_job(ranks) if groups is None else groups
    tier_of = {gpu["uuid"]: str(gpu.get("tier")) for gpu in gpus if gpu.get("uuid")}
    for label, run in runs.items():
        run["efficiency"] = run_efficiency(members.get(label, []), tier_of)
