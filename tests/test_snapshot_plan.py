"""The snapshot's `plan` (gpumix/hub/plan_in_force.py): the split the shown job runs under, whole or
not at all, stable across ticks and restarts, null only when no job reports (issue 12, item 14)."""

from __future__ import annotations

from typing import Any

from gpumix.hub.plan_in_force import JOBS_KEPT, PlansInForce, split_of


def rank(r: int, samples: float | None, world: int = 2, job: str | None = "train", connected: bool = True,
         run_id: str | None = None) -> dict[str, Any]:
    return {"rank": r, "world_size": world, "job": job, "run_id": run_id, "connected": connected,
            "samples": samples, "micro_batch": 8.0 if samples else None,
            "accumulation_steps": samples / 8 if samples else None, "samples_per_s": 100.0 * (r + 1)}


def snapshot(ranks: list[dict[str, Any]], jobs: dict[str, Any] | None = None) -> dict[str, Any]:
    live = [r for r in ranks if r["connected"]]
    run = {"job": live[0]["job"], "run_id": live[0]["run_id"], "ranks": len(live)} if live else None
    return {"ranks": ranks, "run": run, "jobs": jobs or {}}


def status(plan_id: str | None, restarts: int = 0, resume_step: int = 0) -> dict[str, Any]:
    return {"state": "running", "plan_id": plan_id, "restarts": restarts, "resume_step": resume_step}


def test_no_job_reporting_is_null() -> None:
    assert PlansInForce().view(snapshot([]), wall_s=1.0) is None


def test_an_unsupervised_job_has_the_split_its_ranks_report() -> None:
    plan = PlansInForce().view(snapshot([rank(0, 64.0), rank(1, 32.0)]), wall_s=5.0)
    assert plan == {"job": "train", "plan_id": None, "supervised": False, "global_batch": 96,
                    "ranks": [{"rank": 0, "samples": 64, "micro_batch": 8, "accumulation_steps": 8},
                              {"rank": 1, "samples": 32, "micro_batch": 8, "accumulation_steps": 4}],
                    "restarts": None, "applied_at_step": None, "applied_s": 5.0, "predicted_speedup": None}
    assert all(isinstance(share["samples"], int) for share in plan["ranks"])  # whole counts stay ints


def test_the_plan_is_the_same_dict_every_tick_while_rates_change() -> None:
    plans = PlansInForce()
    first = plans.view(snapshot([rank(0, 64.0), rank(1, 32.0)], {"train": status("p1")}), wall_s=5.0)
    ranks = [rank(0, 64.0), rank(1, 32.0)]
    ranks[0]["samples_per_s"] = 999.0
    assert plans.view(snapshot(ranks, {"train": status("p1")}), wall_s=9.0) == first  # applied_s stays 5.0


def test_a_restart_shows_the_old_plan_until_the_new_split_is_whole() -> None:
    plans = PlansInForce()
    before = plans.view(snapshot([rank(0, 48.0), rank(1, 48.0)], {"train": status("initial")}), wall_s=1.0)
    assert before is not None and before["plan_id"] == "initial"
    plans.requested("train", {"plan_id": "p2", "speedup": 1.42, "global_batch": 96})
    relaunching = {"train": status("p2", restarts=1, resume_step=120)}
    gone = [rank(0, 48.0, connected=False), rank(1, 48.0, connected=False)]
    assert plans.view(snapshot(gone, relaunching), wall_s=2.0) == before  # run is None: the job is kept
    half = [rank(0, 64.0), rank(1, 48.0, connected=False)]
    assert plans.view(snapshot(half, relaunching), wall_s=3.0) == before  # rank 1 not back yet
    after = plans.view(snapshot([rank(0, 64.0), rank(1, 32.0)], relaunching), wall_s=4.0)
    assert after is not None
    assert (after["plan_id"], after["global_batch"], after["restarts"], after["applied_at_step"],
            after["applied_s"], after["predicted_speedup"]) == ("p2", 96, 1, 120, 4.0, 1.42)
    assert [s["samples"] for s in after["ranks"]] == [64, 32]


def test_a_job_starting_up_reports_its_plan_id_without_a_split() -> None:
    plan = PlansInForce().view(snapshot([rank(0, 64.0)], {"train": status("initial")}), wall_s=1.0)
    assert plan is not None and (plan["plan_id"], plan["ranks"], plan["global_batch"]) == ("initial", [], None)


def test_a_split_is_whole_only_with_every_rank_of_the_world_and_its_samples() -> None:
    assert split_of([rank(0, 64.0), rank(1, None)]) is None
    assert split_of([rank(0, 64.0, world=3), rank(1, 32.0, world=3)]) is None
    assert split_of([rank(0, 64.0), rank(2, 32.0)]) is None
    assert split_of([rank(0, 64.0, world=1), rank(0, 32.0, world=1)]) is None  # two rank 0s is no split
    assert split_of([rank(0, float("nan"), world=1)]) is None


def test_absurd_predictions_are_not_kept_and_memory_is_bounded() -> None:
    plans = PlansInForce()
    for speedup in (float("inf"), float("nan"), -1.0, 1e9, True, "2"):
        plans.requested("train", {"plan_id": "p", "speedup": speedup})
    assert not plans._predicted
    for job in range(JOBS_KEPT + 10):
        plans.view(snapshot([rank(0, 8.0, world=1, job=f"j{job}")]), wall_s=float(job))
    assert len(plans._plans) == JOBS_KEPT
