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
