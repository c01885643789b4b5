"""The planner's all-reduce input from a kept `gpumix probe` result: `gpumix plan` and the monitor's split
(`s`) read it from one place (gpumix.advice.probe_results.job_allreduce_floor), so both predict alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumix.advice.probe_results import job_allreduce_floor
from gpumix.hub import Hub
from gpumix.probe import store
from gpumix.tui.app import GpumixApp
from tests.conftest import ManualClock
from tests.test_advisor import add_ranks
from tests.test_advisor_probe import floor_over, kept_report
from tests.test_plan_inputs import run_process

FLOOR_TEXT = "measured all-reduce floor: 1.9 GB/s bus through host memory over these GPUs (gpumix probe, 3 h ago)"


def test_the_floor_over_exactly_the_jobs_gpus(demo_hub: Hub, tmp_path: Path) -> None:
    add_ranks(demo_hub, [0.20, 0.15, 0.12], gradient_bytes=4e8)
    snapshot = demo_hub.snapshot()
    assert job_allreduce_floor(snapshot, "train", tmp_path) is None  # nothing kept: the link prior
    store.save(kept_report(snapshot, allreduce=floor_over([0, 1, 2], 1.9e9)), tmp_path)
    assert job_allreduce_floor(snapshot, "train", tmp_path) == (1.9e9, FLOOR_TEXT)
    store.save(kept_report(snapshot, allreduce=floor_over([0, 1], 1.9e9)), tmp_path / "pair")
    assert job_allreduce_floor(snapshot, "train", tmp_path / "pair") is None  # measured over other GPUs


def test_the_monitors_split_uses_the_kept_floor_as_gpumix_plan_does(demo_hub: Hub, clock: ManualClock, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    run_process(demo_hub, clock, pid=100, samples=64, compute_s=0.30, comm_s=0.05, ends=False)
    snapshot = demo_hub.snapshot()
    monkeypatch.setattr(store, "state_dir", lambda: tmp_path)
    app = GpumixApp(demo_hub)
    before = app._plan_json(snapshot)
    assert before is not None and "link prior" in before["basis"]["communication"]["prior"]
    store.save(kept_report(snapshot, allreduce=floor_over([0], 1.9e9)), tmp_path)
    after = app._plan_json(snapshot)
    assert after is not None and after["basis"]["communication"]["prior"] == FLOOR_TEXT
