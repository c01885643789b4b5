"""Restarts across epochs: a real 3-rank DDP job (gloo) under `gpumix run`'s supervisor spans 5
epochs and is restarted twice, in different epochs, under unequal splits; it ends with the float64
parameters of an uninterrupted equal-split run, having trained every sample exactly once per epoch.

`agent.resume_step` counts optimizer steps over the whole run; the example resumes at the epoch
and step within it that they reach (GlobalBatchSampler.resumed). A plan with another global batch
would move those epoch boundaries, so the supervisor refuses it and the run goes on.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpumix.agent.batch_split import GlobalBatchSampler
from tests.conftest import wait_until
from tests.test_restart import (
    NEW_PLAN,
    SECOND_PLAN,
    assert_final_equals_reference,
    command,
    supervise,
    traces,
    wait_for_step,
)

DATASET = 240  # 10 global batches of 24: an epoch is 10 steps
STEPS = 50  # 5 epochs
STEPS_PER_EPOCH = DATASET // 24
OTHER_BATCH = {"plan_id": "bigger", "global_batch": 30, "ranks": [
    {"rank": r, "samples": 10, "micro_batch": 10, "accumulation_steps": 1, "loss_weight": 1.0} for r in range(3)]}


def job(tmp_path: Path, *extra: str) -> list[str]:
    """The restart tests' job, over 5 epochs of a 240-sample dataset."""
    base = command(tmp_path, *extra)
    base[base.index("--steps") + 1] = str(STEPS)
    base[base.index("--dataset") + 1] = str(DATASET)
    return base


@pytest.mark.slow
def test_two_restarts_in_different_epochs_continue_exactly(tmp_path: Path, hub_socket) -> None:
    hub, socket_path = hub_socket
    # the uninterrupted reference: before the fix it stopped after one epoch and wrote no final file
    reference = subprocess.run(job(tmp_path, "--final", str(tmp_path / "reference.pt"),
                                   "--checkpoint", str(tmp_path / "ref-ckpt.pt")),
                               env={**os.environ, "GPUMIX_DISABLE": "1"},
                               capture_output=True, text=True, timeout=180)
    assert reference.returncode == 0, reference.stderr[-2000:]
    assert (tmp_path / "reference.pt").exists(), "the uninterrupted run trained all its epochs"

    (tmp_path / "trace").mkdir()
    supervisor, outcome = supervise(tmp_path, socket_path, job(
        tmp_path, "--step-sleep", "0.1", "--trace", str(tmp_path / "trace"),
        "--checkpoint", str(tmp_path / "ckpt.pt"), "--final", str(tmp_path / "final.pt")))
    wait_for_step(hub, 12)  # into the second epoch
    # another global batch first: refused (it would skip or repeat samples), the run goes on
    assert hub.request_restart("t", OTHER_BATCH)["ok"]
    assert wait_until(lambda: any(p["plan_id"] == "bigger" for p in supervisor.plan_log), 60), supervisor.message
    refused = next(p["outcome"] for p in supervisor.plan_log if p["plan_id"] == "bigger")
    assert refused.startswith("restart refused") and "global batch 30 is not the job's 24" in refused
    assert hub.request_restart("t", NEW_PLAN)["ok"]
    assert wait_until(lambda: supervisor.restarts == 1, 120), supervisor.message
    first_stop = supervisor.resume_step
    wait_for_step(hub, first_stop + 6)  # the second stop is >= 11 steps on: another epoch
    assert hub.request_restart("t", SECOND_PLAN)["ok"]
    outcome["thread"].join(timeout=240)
    assert outcome.get("code") == 0, supervisor.message
    second_stop = supervisor.resume_step
    assert supervisor.restarts == 2
    assert first_stop >= 12 and first_stop // STEPS_PER_EPOCH < second_stop // STEPS_PER_EPOCH < STEPS // STEPS_PER_EPOCH

    by_rank = traces(tmp_path / "trace")
    assert [e["step"] for e in by_rank[0]] == list(range(STEPS)), "every optimizer step exactly once"
    assert all(e["epoch"] == e["step"] // STEPS_PER_EPOCH for rank in by_rank.values() for e in rank)
    assert {e["plan"] for e in by_rank[0] if first_stop <= e["step"] < second_stop} == {"unequal"}
    assert {e["plan"] for e in by_rank[0] if e["step"] >= second_stop} == {"second"}
    for epoch in range(STEPS // STEPS_PER_EPOCH):
        order = GlobalBatchSampler(DATASET, [24], 0, seed=7, epoch=epoch).permutation()
        seen = [i for rank in by_rank.values() for e in rank if e["epoch"] == epoch for i in e["indices"]]
        assert sorted(seen) == list(range(DATASET)), f"epoch {epoch}: every sample exactly once"
        for step in range(STEPS_PER_EPOCH):  # the epoch's own order, whatever the split
            at = epoch * STEPS_PER_EPOCH + step
            batch = {i for rank in by_rank.values() for e in rank if e["step"] == at for i in e["indices"]}
            assert batch == set(order[step * 24:(step + 1) * 24]), at
    assert_final_equals_reference(tmp_path)
