"""The hub fills the snapshot's `plan` from its ranks and the job's supervisor, through a restart into
a plan asked for with a predicted speedup; a recording gets one `plan` event per plan (issue 12,
item 14). Needs the Hub's three calls into gpumix/hub/plan_in_force.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from gpumix.hub import Hub
from gpumix.hub.ranks import MEDIAN_WINDOW, parse_hello, parse_step
from gpumix.record.recorder import Recorder
from tests.conftest import ManualClock


def start_ranks(hub: Hub, run_id: str, samples: list[int], pid0: int) -> list[Any]:
    keys = [hub.agent_hello({**parse_hello({"rank": r, "world_size": len(samples), "job": "train", "pid": pid0 + r,
                                            "run_id": run_id, "hostname": "box"}), "peer_uid": None})
            for r in range(len(samples))]
    for step in range(MEDIAN_WINDOW):
        for key, n in zip(keys, samples, strict=True):
            hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.5, "samples": n, "micro_batch": 16,
                                            "accumulation_steps": n // 16}))
    return keys


def supervisor(hub: Hub, plan_id: str, restarts: int = 0, resume_step: int = 0, accepts: bool = False) -> Any:
    return hub.supervisor_poll("train", {"state": "running", "message": "", "restarts": restarts, "plan_id": plan_id,
                                         "resume_step": resume_step, "pid": 4000, "granularity": 1,
                                         "accepts_plan": accepts, "plans": []})


def test_the_snapshot_plan_follows_a_restart_and_is_recorded_once_per_plan(demo_hub: Hub, clock: ManualClock,
                                                                           tmp_path: Path) -> None:
    assert demo_hub.snapshot()["plan"] is None  # no job reports
    recorder = Recorder(tmp_path / "rec.sqlite").attach(demo_hub)
    supervisor(demo_hub, "initial")
    old = start_ranks(demo_hub, "run-1", [48, 48], pid0=100)
    for _ in range(3):
        clock.advance(1.0)
        demo_hub.tick()
    plan = demo_hub.snapshot()["plan"]
    assert (plan["job"], plan["plan_id"], plan["global_batch"], [s["samples"] for s in plan["ranks"]]) == (
        "train", "initial", 96, [48, 48])
    asked = {"plan_id": "p2", "global_batch": 96, "speedup": 1.31,
             "ranks": [{"rank": 0, "samples": 64, "micro_batch": 16, "accumulation_steps": 4, "loss_weight": 1.33},
                       {"rank": 1, "samples": 32, "micro_batch": 16, "accumulation_steps": 2, "loss_weight": 0.67}]}
    assert demo_hub.control({"type": "replan", "job": "train", "plan": asked})["ok"]
    assert supervisor(demo_hub, "initial", accepts=True)["plan"]["plan_id"] == "p2"
    for key in old:
        demo_hub.agent_gone(key)
    supervisor(demo_hub, "p2", restarts=1, resume_step=40)
    clock.advance(1.0)
    demo_hub.tick()
    assert demo_hub.snapshot()["plan"]["plan_id"] == "initial"  # the new ranks are not back yet
    start_ranks(demo_hub, "run-2", [64, 32], pid0=200)
    for _ in range(3):
        clock.advance(1.0)
        demo_hub.tick()
    plan = demo_hub.snapshot()["plan"]
    assert (plan["plan_id"], plan["global_batch"], [s["samples"] for s in plan["ranks"]], plan["restarts"],
            plan["applied_at_step"], plan["predicted_speedup"]) == ("p2", 96, [64, 32], 1, 40, 1.31)
    assert [s["accumulation_steps"] for s in plan["ranks"]] == [4, 2]
    assert recorder.flush()
    rows = sqlite3.connect(tmp_path / "rec.sqlite").execute(
        "SELECT payload FROM events WHERE kind = 'plan' ORDER BY t").fetchall()
    assert [json.loads(p)["plan"]["plan_id"] for (p,) in rows] == ["initial", "p2"]
    recorder.close()
