"""The snapshot a client reads: the last hardware snapshot with what happened since merged in (the
ranks as of now, their runs and stragglers, efficiency, tiers, supervised jobs, the plan in force and
the advisor's findings). Steps arrive between ticks, so this is redone whenever the ranks changed.

What it may import: the hub's ranks, efficiency and plan in force; gpumix.advice, gpumix.power.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from typing import Any

from gpumix.advice.advisor import AdvisorSettings, findings
from gpumix.hub.efficiency import add_efficiency
from gpumix.hub.plan_in_force import PlansInForce
from gpumix.hub.ranks import (
    RankStream,
    bound_detail,
    mark_stragglers,
    points_view,
    rank_summary,
    runs_summary,
)
from gpumix.power.tiers import tier_table
from gpumix.wire.jobs import ranks_by_job

DETAIL_RANKS = 256  # ranks whose env, versions, transport, losses and points a snapshot carries


def merge_ranks(hardware_snapshot: dict[str, Any], streams: Iterable[RankStream], now_s: float,
                jobs: dict[str, dict[str, Any]], plans_in_force: PlansInForce, wall_s: float,
                power_budget_w: float | None, detail_ranks: int = DETAIL_RANKS) -> dict[str, Any]:
    """`streams` in the snapshot's order; `jobs` the supervisors' statuses; `wall_s` the wall clock."""
    ranks = [rank_row(stream, now_s) for stream in streams]
    groups = ranks_by_job(ranks)  # the ranks by job once for the parts below (issue 13: each made its own)
    mark_stragglers(ranks, groups)
    snapshot = dict(hardware_snapshot)
    snapshot["ranks"] = ranks
    snapshot["run"], snapshot["runs"] = runs_summary(ranks, groups)
    add_efficiency(snapshot["runs"], ranks, hardware_snapshot["gpus"], groups)
    on_gpu: dict[Any, list[int]] = {}  # uuid -> its live ranks, in order: one pass, not one per GPU
    for rank in ranks:
        if rank["connected"]:
            on_gpu.setdefault(rank["gpu_uuid"], []).append(rank["rank"])
    snapshot["gpus"] = [{**gpu, "ranks": list(on_gpu.get(gpu["uuid"], ()))} for gpu in hardware_snapshot["gpus"]]
    snapshot["tiers"] = tier_table(snapshot)
    snapshot["jobs"] = jobs
    snapshot["plan"] = plans_in_force.view(snapshot, wall_s, groups)
    host = snapshot.get("host") or {}
    settings = advisor_settings(power_budget_w, bool(host.get("infiniband")), *(os.environ.get(name) for name in SETTINGS_ENV))
    snapshot["findings"] = [finding.to_json() for finding in findings(snapshot, settings, snapshot["tiers"])]
    bound_detail(ranks, detail_ranks)  # after the advisor, which reads every rank's env
    return snapshot


# what AdvisorSettings' defaults read (the probe folder from XDG_STATE_HOME or HOME, the P2P driver floor)
SETTINGS_ENV = ("XDG_STATE_HOME", "HOME", "GPUMIX_4090_P2P_MIN_DRIVER")


@functools.lru_cache(maxsize=8)
def advisor_settings(power_budget_w: float | None, has_infiniband: bool, *environment: str | None) -> AdvisorSettings:
    """The advisor's settings, made once per budget, InfiniBand and environment they read: made at each
    merge, their defaults looked up the home folder (pathlib) once a tick (issue 13). Frozen: shared safely."""
    return AdvisorSettings(power_budget_w=power_budget_w, has_infiniband=has_infiniband)


def rank_row(stream: RankStream, now_s: float) -> dict[str, Any]:
    if stream.connected:
        return {**rank_summary(stream), "points": points_view(stream, now_s)}
    if stream.gone_summary is None:  # a gone rank's row stays the same: the recorder sees no change
        stream.gone_summary = {**rank_summary(stream), "points": points_view(stream, stream.gone_since_s or now_s)}
    return dict(stream.gone_summary)
