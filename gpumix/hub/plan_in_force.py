"""The plan in force: the split the shown job's ranks run under, for the snapshot's `plan` (issue 12, item 14).

The split is what the ranks report (samples n_r, micro-batch m_r, accumulation steps k_r), so a job
started without `gpumix run` has one too; a supervised job adds its supervisor's plan id, restarts
and the step it resumed from. A split counts once it is complete (every rank of the world reports
its samples): during a restart the ranks come back one by one, and the plan shown stays the last
complete one until the new split is whole, so a recording gets one `plan` event per change.

`applied_s` is the wall-clock time the hub first saw the split whole; `predicted_speedup` the
planner's figure for a plan asked for through this hub (`gpumix plan --apply`, the TUI), when known.

What it may import: the standard library and gpumix.wire.
"""

from __future__ import annotations

import math
import operator
from collections import OrderedDict
from typing import Any

from gpumix.wire.jobs import job_label, ranks_by_job

JOBS_KEPT = 64  # jobs whose last complete plan is remembered (the hub keeps at most as many supervisors)
PREDICTIONS_KEPT = 64  # (job, plan id) -> predicted speedup, of plans asked for
MAX_SPEEDUP = 1000.0  # a planner's prediction above this is not a figure to show
PLAN_ID_CHARS = 32  # the supervisor reports plan ids cut to this


def _count(value: Any) -> int | float | None:
    """A rank's reported count as an int when whole (medians of whole numbers can be halves)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value) if float(value).is_integer() else float(value)


def split_of(ranks: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The live ranks' split, by rank; None unless complete (every rank of the world, each with samples)."""
    live = sorted((r for r in ranks if r.get("connected")), key=lambda r: r.get("rank") or 0)
    worlds = {r.get("world_size") for r in live}
    if not live or len(worlds) != 1 or None in worlds or len(live) != worlds.pop():
        return None
    if [r.get("rank") for r in live] != list(range(len(live))):
        return None
    split = [{"rank": r["rank"], "samples": _count(r.get("samples")), "micro_batch": _count(r.get("micro_batch")),
              "accumulation_steps": _count(r.get("accumulation_steps"))} for r in live]
    return split if all(share["samples"] is not None for share in split) else None


_SPLIT_FIELDS = ("connected", "rank", "world_size", "samples", "micro_batch", "accumulation_steps")  # split_of's
_SPLIT_READS = operator.itemgetter(*_SPLIT_FIELDS)


def _split_reads(rank: dict[str, Any]) -> tuple[Any, ...]:
    """_SPLIT_READS for a row that may lack some of the fields."""
    return tuple(map(rank.get, _SPLIT_FIELDS))


class PlansInForce:
    """Per job, the last complete plan seen; `view` picks the shown job's. Bounded: JOBS_KEPT jobs."""

    def __init__(self) -> None:
        self._plans: OrderedDict[str, dict[str, Any]] = OrderedDict()  # job label -> its plan row
        self._predicted: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._shown: str | None = None
        self._split_key: tuple[Any, ...] | None = None  # what the last split was made of, and the split
        self._split: list[dict[str, Any]] | None = None

    def requested(self, job: str, plan: dict[str, Any]) -> None:
        """A plan asked of the job's supervisor through this hub: keep its predicted speedup, if any."""
        speedup = plan.get("speedup")
        if isinstance(speedup, bool) or not isinstance(speedup, int | float) or not 0 < speedup <= MAX_SPEEDUP:
            return
        key = (job, str(plan.get("plan_id") or "")[:PLAN_ID_CHARS])
        self._predicted[key] = float(speedup)
        self._predicted.move_to_end(key)
        while len(self._predicted) > PREDICTIONS_KEPT:
            self._predicted.popitem(last=False)

    def view(self, snapshot: dict[str, Any], wall_s: float,
             groups: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any] | None:
        """The shown job's plan in force (a merged snapshot: ranks, run, jobs); None when no job reports.
        `groups`: ranks_by_job(snapshot["ranks"]), where the caller has it."""
        jobs = snapshot.get("jobs") or {}
        run = snapshot.get("run")
        if run is not None:
            label = job_label(run.get("job"), run.get("run_id"))
        elif self._shown is not None and self._shown in jobs:  # its ranks are restarting: keep showing it
            label = self._shown
        elif jobs:
            label = min(jobs)
        else:
            return None
        self._shown = label
        status = jobs.get(label) or {}
        groups = ranks_by_job(snapshot.get("ranks") or []) if groups is None else groups
        split = self._split_of(label, groups.get(label, []))
        plan_id = status.get("plan_id")
        if split is not None:
            row = self._plans.get(label)
            if row is None or row["ranks"] != split or row["plan_id"] != plan_id:
                row = self._remember(label, {
                    "job": label, "plan_id": plan_id, "supervised": bool(status),
                    "global_batch": _count(sum(share["samples"] for share in split)),
                    "ranks": [dict(share) for share in split],  # its own rows: the split is shared
                    "restarts": status.get("restarts"), "applied_at_step": status.get("resume_step"),
                    "applied_s": wall_s, "predicted_speedup": self._predicted.get((label, plan_id or "")),
                })
            return dict(row)
        if label in self._plans:
            return dict(self._plans[label])
        # nothing complete yet: the job reports, its split is not whole (starting up)
        return {"job": label, "plan_id": plan_id, "supervised": bool(status), "global_batch": None, "ranks": [],
                "restarts": status.get("restarts"), "applied_at_step": status.get("resume_step"),
                "applied_s": None, "predicted_speedup": self._predicted.get((label, plan_id or ""))}

    def _split_of(self, label: str, ranks: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """split_of(ranks), made again only when what it reads changed: one C-level read per rank of the
        figures it reads, against the last merge's (issue 13: 20 calls a rank each merge). Kept for the
        last job asked only: the view shows one."""
        try:
            key = (label, tuple(map(_SPLIT_READS, ranks)))
        except KeyError:  # a row without every field (not the merge's): read as split_of does
            key = (label, tuple(map(_split_reads, ranks)))
        if self._split_key != key:
            self._split_key, self._split = key, split_of(ranks)
        return self._split  # shared with the next views: read only, copied where a row keeps it

    def _remember(self, label: str, row: dict[str, Any]) -> dict[str, Any]:
        self._plans[label] = row
        self._plans.move_to_end(label)
        while len(self._plans) > JOBS_KEPT:
            self._plans.popitem(last=False)
        return row
