"""Whether a plan interpolates between splits its ranks have measured (issue 16).

A count between two counts its rank has run is read off the rank's own points; a count past them is an
extrapolation. Over the oracle's 23 sets (benchmarks/oracle_replan.py, session 17's code) the step-time
predictions of plans whose every count lay within its rank's measured counts erred a median 0.7 % (90th
percentile 2.6 %, 26 plans); the others 2.8 % (9.8 %, 500 plans). So auto re-plan asks less of an
interpolating plan (gpumix/run/auto_replan.py; docs/planner.md, session 19).

Within the points is not within the stairs: a count between two measured counts can still sit on a stair
they leave open (g4 seed 107 gen-00: a 4090 measured at 64 and 96, whose points leave tiles of 16 open, was
offered 92, which runs as 96). A restart's gain comes from the rank that paces the step now giving up work,
so that rank's new count must cost the same work under the narrowest tile its points fit and under the
widest they leave open.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpumix.plan.split_types import RankMeasure, RankPlan
from gpumix.plan.stairs import learned_tile, pass_work, widest_tile


def interpolates(measures: Sequence[RankMeasure], ranks: Sequence[RankPlan]) -> bool:
    """Every rank's planned count lies within the counts it has measured (two at least), and the rank
    pacing the step now takes a count whose padding its points leave in no doubt."""
    planned = {r.rank: r for r in ranks}
    if not measures or any(m.rank not in planned for m in measures):
        return False
    for m in measures:
        counts = {n for n, _, _ in m.measured_points()}
        if len(counts) < 2 or not min(counts) <= planned[m.rank].samples <= max(counts):
            return False
    pacing = max(measures, key=lambda m: m.current_compute_s)
    points = pacing.measured_points()
    tile = learned_tile(points, 1)
    widest = widest_tile(points, tile)
    new = planned[pacing.rank]
    return pass_work(new.samples, new.micro_batch, tile) == pass_work(new.samples, new.micro_batch, widest)
