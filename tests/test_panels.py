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


def no_run(jobs: dict) -> dict:
    return {"run": None, "runs": {}, "gpus": [], "ranks": [], "jobs": jobs}


def test_a_starting_or_relaunching_job_is_waited_for_not_blamed() -> None:
    # the statuses a gpumix run supervisor sends (gpumix/run/supervisor.py)
    starting = run_line(no_run({"demo": {"state": "starting", "message": "launching", "restarts": 0}}))
    relaunching = run_line(no_run({"demo": {"state": "relaunching", "restarts": 1,
                                            "message": "checkpointed at step 40; relaunching under plan ab12"}}))
    for line in (starting, relaunching):
        assert "waiting for the job's first steps" in line and "demo" in line
        assert "add gpumix.agent.start()" not in line
    assert "plan ab12" in relaunching
    exited = run_line(no_run({"demo": {"state": "exited", "message": "exit code 1"}}))
    assert "exited" in exited and "exit code 1" in exited and "agent.start" not in exited
    assert "add gpumix.agent.start()" in run_line(no_run({}))  # no job at all: the agent is missing


def test_job_text_in_the_run_line_is_plain() -> None:
    line = run_line(no_run({"\x1b[31mjob": {"state": "starting", "message": "[b]x[/b]\x07"}}))
    assert "\x1b" not in line and "\x07" not in line
