"""`gpumix-top --once` text: the run, its ranks and the findings after the GPU lines (issue 12, item 14)."""

from __future__ import annotations

from gpumix.hub import Hub
from gpumix.tui.main import ONCE_MAX_RANKS, text_summary


def test_once_text_has_run_ranks_and_findings(demo_hub: Hub) -> None:
    snapshot = demo_hub.snapshot()
    snapshot["findings"] = [{"severity": "warning", "title": "P2P refused\x1b[2J", "evidence": "", "fix": ""}]
    snapshot["ranks"] = [{"job": "demo", "rank": r, "step": 12, "step_time_s": 0.25, "samples_per_s": 128.0,
                          "straggler": r == 0, "connected": True} for r in range(ONCE_MAX_RANKS + 3)]
    text = text_summary(snapshot)
    assert text.count("[") >= 10  # the GPU lines are still there
    assert "\nrun: " in text
    assert "rank demo/0 step 12 0.250s 128 samples/s straggler" in text
    assert "+3 more ranks" in text
    assert "findings: 1\n  warning: P2P refused" in text and "\x1b" not in text


def test_once_text_without_a_job_says_so(demo_hub: Hub) -> None:
    text = text_summary(demo_hub.snapshot())
    assert "run: no training ranks reporting" in text
    assert "findings:" in text


def test_once_text_prints_the_plan_in_force(demo_hub: Hub) -> None:
    snapshot = demo_hub.snapshot()
    snapshot["plan"] = {"job": "demo", "plan_id": "auto-1\x1b[2J", "supervised": True, "global_batch": 96,
                        "ranks": [{"rank": 0, "samples": 64, "micro_batch": 16, "accumulation_steps": 4},
                                  {"rank": 1, "samples": 32, "micro_batch": 16, "accumulation_steps": 2}],
                        "restarts": 1, "applied_at_step": 120, "applied_s": 1.0, "predicted_speedup": 1.418}
    lines = text_summary(snapshot).splitlines()
    (plan,) = [line for line in lines if line.startswith("plan:")]
    assert plan == ("plan: plan auto-1\\x1b[2J of demo, global batch 96, n_r(m_r x k_r) 64(16x4) 32(16x2),"
                    " from step 120, 1.42x predicted")
    assert lines.index(plan) == next(i for i, line in enumerate(lines) if line.startswith("run:")) + 1


def test_once_text_plan_of_a_job_starting_up_and_none_without_a_job(demo_hub: Hub) -> None:
    snapshot = demo_hub.snapshot()
    assert not [line for line in text_summary(snapshot).splitlines() if line.startswith("plan:")]
    snapshot["plan"] = {"job": "train", "plan_id": None, "supervised": False, "global_batch": None, "ranks": [],
                        "restarts": None, "applied_at_step": None, "applied_s": None, "predicted_speedup": None}
    assert "plan: the job's own split of train, split not whole yet (ranks starting)" in text_summary(snapshot)
