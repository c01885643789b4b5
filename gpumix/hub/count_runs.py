"""Points a probe leaves: steps at other counts within one process.

A rank's operating point (ranks.operating_point) is what one process measured at its split, kept when
it restarts. A stair probe (agent/probe_schedule.py) runs a few steps at counts near the split within
the same process, so the first plan sees more than one point a rank. Each run of steps at one count,
once the count changes, leaves a point shaped as an operating point and marked "probe": the planner
draws its curve through it but never judges the curve's error by it (plan.prediction.hindsight_error).

A run's first SETTLE_STEPS steps are left out: a new shape's first run pays for its kernels' choice
and the allocator's growth. A run with fewer than MIN_STEPS steps after them leaves nothing (an
epoch's short last batch). What may import it: the hub's ranks and intake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpumix.hub.step_window import window_median, window_spread

SETTLE_STEPS = 1
MIN_STEPS = 4  # a median and a spread (step_window.MIN_SPREAD_STEPS) of this many steps at least
MAX_STEPS = 16  # kept a run: the run at the split itself goes on for the whole process


@dataclass
class CountRun:
    """The steps in a row at one count (their times, for medians), newest run of a process."""

    samples: int | None
    micro_batch: int | None
    seen: int = 0
    computes_s: list[float] = field(default_factory=list)  # each step's own: its time less its waits
    mem_peak_bytes: float | None = None


def follow(run: CountRun | None, steps: list[dict[str, Any]], points: list[dict[str, Any]], kept: int,
           now_s: float) -> CountRun | None:
    """The run these steps (in order, each with a step time) end in; a run they end leaves its point
    in `points` (at most `kept` of them, the newest; one a count)."""
    for step in steps:
        samples = step.get("samples")
        if run is None or samples != run.samples:
            if run is not None:
                _leave_point(run, points, kept, now_s)
            run = CountRun(samples, step.get("micro_batch"))
        run.seen += 1
        if run.seen <= SETTLE_STEPS or run.seen > SETTLE_STEPS + MAX_STEPS:  # (no call a step: issue 13)
            continue
        run.computes_s.append(max(0.0, step["step_time_s"] - (step.get("comm_s") or 0.0) - (step.get("data_wait_s") or 0.0)))
        peak = step.get("mem_peak_bytes")
        if peak is not None and (run.mem_peak_bytes is None or peak > run.mem_peak_bytes):
            run.mem_peak_bytes = peak
    return run


def _leave_point(run: CountRun, points: list[dict[str, Any]], kept: int, now_s: float) -> None:
    if not run.samples or run.samples < 1 or len(run.computes_s) < MIN_STEPS:
        return
    # the median of each step's own compute, not a rank row's medians' difference (docs/hub.md, session
    # 12): over a few steps whose slowest rank changes, step and comm medians come from different steps
    # (with them the probe lost rigs in the oracle's world: docs/planner.md, session 23); a probe step's
    # comm is its own (agent.ddp.compute_apart)
    compute_s = window_median(run.computes_s) or 0.0
    if compute_s <= 0.0:
        return
    put_point(points, {"samples": run.samples, "compute_s": compute_s, "compute_spread_s": window_spread(run.computes_s),
                       "micro_batch": run.micro_batch, "mem_peak_bytes": run.mem_peak_bytes, "t": now_s, "probe": True},
              kept)


def put_point(points: list[dict[str, Any]], point: dict[str, Any], kept: int) -> None:
    """File a rank's point: it replaces one at the same count, and the newest `kept` stay (a probe's run
    here; a restart's operating point in ranks.carry_points)."""
    points[:] = [*(p for p in points if p["samples"] != point["samples"]), point][-kept:]
