"""The run line names the straggler's tier from the run's own job, whatever else reports."""

from __future__ import annotations

from gpumix.tui.panels import run_line


def rank(job: str, number: int, uuid: str) -> dict:
    return {"job": job, "rank": number, "gpu_uuid": uuid, "run_id": f"{job}-run"}


def test_straggler_tier_comes_from_the_run_s_own_job() -> None:
    gpus = [{"uuid": "GPU-a", "tier": "RTX 3090 24G"}, {"uuid": "GPU-b", "tier": "RTX 4090 24G"},
            {"uuid": "GPU-c", "tier": "RTX 3060 12G"}]
    big = {"job": "big", "ranks": 2, "step_time_s": 0.5, "samples_per_s": 100.0, "stragglers": [0]}
    small = {"job": "small", "ranks": 1, "step_time_s": 0.1, "samples_per_s": 10.0, "stragglers": []}
    snapshot = {"run": big, "runs": {"big": big, "small": small}, "gpus": gpus, "jobs": {},
                # the other job's rank 0 comes last: a lookup by rank number alone picks it
                "ranks": [rank("big", 0, "GPU-a"), rank("big", 1, "GPU-b"), rank("small", 0, "GPU-c")]}
    line = run_line(snapshot)
    assert "straggler 0 (RTX 3090 24G)" in line and "3060" not in line
    assert line.startswith(" big: 2 ranks") and "+1 other jobs" in line
