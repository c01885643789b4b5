"""Re-plans are queued in order or refused with the reason, never acknowledged and then dropped.

Before the fix the hub kept one plan per job (a second request replaced the first) and handed
it to any poll, also to the supervisor's polls in the middle of a restart, which threw it away:
two requests both answered `ok: True`, one restart happened, the other was mentioned nowhere.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from gpumix.hub import jobs
from gpumix.run.supervisor import Supervisor
from tests.conftest import wait_until


def plan(plan_id: str, samples: int = 8) -> dict:
    return {"plan_id": plan_id, "global_batch": samples,
            "ranks": [{"rank": 0, "samples": samples, "micro_batch": samples, "accumulation_steps": 1, "loss_weight": 1.0}]}


def test_the_hub_queues_plans_in_order_and_hands_them_over_between_restarts(demo_hub) -> None:
    hub = demo_hub
    hub.supervisor_poll("t", {"state": "running", "pid": 7, "accepts_plan": True})
    first, second = hub.request_restart("t", plan("a")), hub.request_restart("t", plan("b"))
    assert (first["ok"], first["queued"], first["message"]) == (True, 1, "restart of t requested")
    assert (second["ok"], second["queued"]) == (True, 2) and "behind 1 earlier" in second["message"]
    assert hub.snapshot()["jobs"]["t"]["queued_plans"] == 2
    assert hub.supervisor_poll("t", {"state": "running", "pid": 7, "accepts_plan": True})["plan"]["plan_id"] == "a"
    # mid-restart the supervisor takes nothing; a request now says a restart is in progress
    assert hub.supervisor_poll("t", {"state": "stopping", "pid": 7, "accepts_plan": False})["plan"] is None
    third = hub.request_restart("t", plan("c"))
    assert third["ok"] and third["queued"] == 2 and "a restart of t is in progress" in third["message"]
    taken = [hub.supervisor_poll("t", {"state": "running", "pid": 7, "accepts_plan": True})["plan"] for _ in range(3)]
    assert [p and p["plan_id"] for p in taken] == ["b", "c", None]


def test_a_full_queue_refuses_with_the_reason(demo_hub) -> None:
    hub = demo_hub
    hub.supervisor_poll("t", {"state": "stopping", "pid": 7, "accepts_plan": False})
    replies = [hub.request_restart("t", plan(str(n))) for n in range(jobs.MAX_WAITING_PLANS + 1)]
    assert [r["ok"] for r in replies] == [True] * jobs.MAX_WAITING_PLANS + [False]
    assert "already wait for its supervisor; try again when they are done" in replies[-1]["message"]
    exited = hub.supervisor_poll("u", {"state": "exited", "pid": 8, "message": "the job exited with code 0"})
    assert exited["plan"] is None and not hub.request_restart("u", plan("x"))["ok"]


# One rank, restartable: its samples come from the plan; a restart exits after the checkpoint.
JOB = r"""
import sys, time
import gpumix.agent
agent = gpumix.agent.start()
samples = agent.plan.share(0).samples if agent.plan else 8
agent.on_checkpoint(lambda steps_done: None)
step = agent.resume_step
while True:
    with agent.step(samples=samples):
        time.sleep(0.02)
    step += 1
    if agent.restart_point(step):
        sys.exit(0)
"""


@pytest.mark.slow
def test_a_plan_asked_for_during_a_restart_runs_after_it(tmp_path: Path, hub_socket, monkeypatch) -> None:
    hub, socket_path = hub_socket
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    supervisor = Supervisor([sys.executable, "-c", JOB], "t", hub=socket_path, control_dir=tmp_path / "control",
                            say=lambda _: None, kill_grace_s=2.0)
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    try:
        def rank_step() -> int:
            ranks = [r for r in hub.snapshot()["ranks"] if r["job"] == "t" and r["connected"]]
            return ranks[0]["step"] or 0 if ranks else 0

        assert wait_until(lambda: rank_step() >= 5, timeout_s=60)
        assert hub.request_restart("t", plan("first"))["ok"]  # the job's B: a restart keeps it
        assert wait_until(lambda: hub.snapshot()["jobs"]["t"]["state"] in jobs.RESTARTING, timeout_s=30)
        second = hub.request_restart("t", plan("second"))
        assert second["ok"] and "in progress" in second["message"]
        assert wait_until(lambda: supervisor.restarts == 2, timeout_s=90), (supervisor.message, list(supervisor.plan_log))
        assert supervisor.plan is not None and supervisor.plan.plan_id == "second"
        assert wait_until(lambda: len(hub.snapshot()["jobs"]["t"]["plans"]) == 2, timeout_s=10)
        logged = hub.snapshot()["jobs"]["t"]["plans"]
        assert [entry["plan_id"] for entry in logged] == ["first", "second"]
        assert all(entry["outcome"].startswith("restarted from step") for entry in logged), logged
    finally:
        supervisor.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()
