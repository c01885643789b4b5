"""Re-plan and restart a real 3-rank DDP job (gloo) under `gpumix run`'s supervisor.

The strongest check: a run restarted mid-way under an unequal split ends with
the same parameters as an uninterrupted run with the equal split (float64):
no optimizer step lost or repeated, the data order continued, the optimizer
state (momentum) restored, and the loss weights make unequal shares exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpumix.agent.batch_split import GlobalBatchSampler
from gpumix.hub import Hub
from gpumix.run.auto_replan import AutoReplan
from gpumix.run.supervisor import Supervisor
from tests.conftest import wait_until

torch = pytest.importorskip("torch")
ROOT = Path(__file__).parents[1]
STEPS = 60
NEW_PLAN = {"plan_id": "unequal", "global_batch": 24, "ranks": [
    {"rank": 0, "samples": 4, "micro_batch": 4, "accumulation_steps": 1, "loss_weight": 4 * 3 / 24},
    {"rank": 1, "samples": 8, "micro_batch": 4, "accumulation_steps": 2, "loss_weight": 8 * 3 / 24},
    {"rank": 2, "samples": 12, "micro_batch": 6, "accumulation_steps": 2, "loss_weight": 12 * 3 / 24},
]}
SECOND_PLAN = {"plan_id": "second", "global_batch": 24, "ranks": [
    {"rank": 0, "samples": 14, "micro_batch": 7, "accumulation_steps": 2, "loss_weight": 14 * 3 / 24},
    {"rank": 1, "samples": 6, "micro_batch": 6, "accumulation_steps": 1, "loss_weight": 6 * 3 / 24},
    {"rank": 2, "samples": 4, "micro_batch": 4, "accumulation_steps": 1, "loss_weight": 4 * 3 / 24},
]}


def command(tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3",
            str(ROOT / "examples" / "restartable_ddp.py"), "--steps", str(STEPS), "--dataset", "2400", *extra]


def supervise(tmp_path: Path, socket_path: str, job_command: list[str]) -> tuple[Supervisor, dict]:
    supervisor = Supervisor(job_command, "t", hub=socket_path, control_dir=tmp_path / "control", say=lambda _: None)
    outcome: dict = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("code", supervisor.run()), daemon=True)
    thread.start()
    outcome["thread"] = thread
    return supervisor, outcome


def wait_for_step(hub: Hub, step: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ranks = [r for r in hub.snapshot()["ranks"] if r["job"] == "t" and r["connected"]]
        if len(ranks) == 3 and min(r["step"] or 0 for r in ranks) >= step:
            return
        time.sleep(0.1)
    raise AssertionError(f"ranks did not reach step {step}")


def run_reference(tmp_path: Path) -> None:
    """The uninterrupted equal-split run, without the agent: its final parameters are the truth."""
    reference = subprocess.run(command(tmp_path, "--final", str(tmp_path / "reference.pt"), "--checkpoint",
                                       str(tmp_path / "ref-ckpt.pt")),
                               env={**os.environ, "GPUMIX_DISABLE": "1"}, capture_output=True, text=True, timeout=180)
    assert reference.returncode == 0, reference.stderr[-2000:]


def assert_final_equals_reference(tmp_path: Path) -> None:
    """Float64 parameters within 1e-9: no step lost or repeated, the data order and optimizer state kept."""
    final, expected = torch.load(tmp_path / "final.pt"), torch.load(tmp_path / "reference.pt")
    for name, value in expected.items():
        assert torch.allclose(final[name], value, atol=1e-9, rtol=0), name


def traces(folder: Path) -> dict[int, list[dict]]:
    return {rank: [json.loads(line) for line in (folder / f"rank{rank}.jsonl").read_text().splitlines()] for rank in range(3)}


@pytest.mark.slow
def test_restart_under_a_new_plan_continues_exactly(tmp_path: Path, hub_socket) -> None:
    hub, socket_path = hub_socket
    run_reference(tmp_path)

    (tmp_path / "trace").mkdir()
    supervisor, outcome = supervise(tmp_path, socket_path, command(
        tmp_path, "--step-sleep", "0.1", "--trace", str(tmp_path / "trace"),
        "--checkpoint", str(tmp_path / "ckpt.pt"), "--final", str(tmp_path / "final.pt")))
    wait_for_step(hub, 8)
    assert hub.request_restart("t", NEW_PLAN)["ok"]
    assert wait_until(lambda: supervisor.restarts == 1, 120), supervisor.message
    first_stop = supervisor.resume_step
    # The relaunched ranks number their steps from the resume step, as the supervisor does: a
    # second restart picks its stop step from them.
    wait_for_step(hub, first_stop + 4)
    assert hub.request_restart("t", SECOND_PLAN)["ok"]
    outcome["thread"].join(timeout=240)
    assert outcome.get("code") == 0, supervisor.message
    assert supervisor.restarts == 2 and first_stop > 8 and supervisor.resume_step > first_stop + 4

    by_rank = traces(tmp_path / "trace")
    steps = [entry["step"] for entry in by_rank[0]]
    assert steps == list(range(STEPS)), "every optimizer step exactly once"
    stop = supervisor.resume_step
    assert {e["plan"] for e in by_rank[0] if e["step"] < first_stop} == {"equal"}
    assert {e["plan"] for e in by_rank[0] if first_stop <= e["step"] < stop} == {"unequal"}
    assert {e["plan"] for e in by_rank[0] if e["step"] >= stop} == {"second"}
    assert [len(e["indices"]) for e in by_rank[2] if first_stop <= e["step"] < stop] == [12] * (stop - first_stop)
    assert [len(e["indices"]) for e in by_rank[0] if e["step"] >= stop] == [14] * (STEPS - stop)
    seen = [i for rank in by_rank.values() for entry in rank for i in entry["indices"]]
    assert len(seen) == len(set(seen)) == STEPS * 24, "no sample twice within the epoch"
    # the data order continued: step t's global batch is the same whatever the split
    order = GlobalBatchSampler(2400, [24], 0, seed=7).permutation()
    for step in range(STEPS):
        batch = {i for rank in by_rank.values() for entry in rank if entry["step"] == step for i in entry["indices"]}
        assert batch == set(order[step * 24:(step + 1) * 24])
    assert_final_equals_reference(tmp_path)
    assert hub.snapshot()["jobs"]["t"]["restarts"] == 2


LEAVE_RANK_2_OUT = {"plan_id": "two", "global_batch": 24, "ranks": [  # the planner's JSON, rank 2 excluded
    {"rank": 0, "samples": 10, "micro_batch": 5, "accumulation_steps": 2, "loss_weight": 10 * 2 / 24},
    {"rank": 1, "samples": 14, "micro_batch": 14, "accumulation_steps": 1, "loss_weight": 14 * 2 / 24},
    {"rank": 2, "samples": 0, "micro_batch": 0, "accumulation_steps": 0, "loss_weight": 0.0},
]}


@pytest.mark.slow
def test_a_plan_that_leaves_a_rank_out_relaunches_with_fewer_ranks(tmp_path: Path, hub_socket) -> None:
    # `--nproc_per_node=3` becomes 2; the same global batch, so the run still ends where an
    # uninterrupted 3-rank run does.
    hub, socket_path = hub_socket
    run_reference(tmp_path)
    (tmp_path / "trace").mkdir()
    supervisor, outcome = supervise(tmp_path, socket_path, command(
        tmp_path, "--step-sleep", "0.1", "--trace", str(tmp_path / "trace"),
        "--checkpoint", str(tmp_path / "ckpt.pt"), "--final", str(tmp_path / "final.pt")))
    wait_for_step(hub, 8)
    assert hub.request_restart("t", LEAVE_RANK_2_OUT)["ok"]
    outcome["thread"].join(timeout=240)
    assert outcome.get("code") == 0, supervisor.message
    assert supervisor.restarts == 1 and "--nproc_per_node=2" in supervisor.command
    stop = supervisor.resume_step
    by_rank = traces(tmp_path / "trace")
    assert [e["step"] for e in by_rank[2]] == list(range(stop))  # rank 2 ran until the stop, then no more
    assert [e["step"] for e in by_rank[0]] == list(range(STEPS))
    order = GlobalBatchSampler(2400, [24], 0, seed=7).permutation()
    for step in range(stop, STEPS):
        batch = [i for rank in (0, 1) for entry in by_rank[rank] if entry["step"] == step for i in entry["indices"]]
        assert sorted(batch) == sorted(order[step * 24:(step + 1) * 24])
    assert_final_equals_reference(tmp_path)


@pytest.mark.slow
def test_auto_replan_takes_samples_from_a_straggler_by_itself(tmp_path: Path, hub_socket) -> None:
    # Rank 2 computes 5 ms per sample more (a weaker card); nobody asks for a re-plan.
    hub, socket_path = hub_socket
    run_reference(tmp_path)
    (tmp_path / "trace").mkdir()
    job = command(tmp_path, "--step-sleep", "0.05", "--trace", str(tmp_path / "trace"), "--slow-rank", "2",
                  "--slow-s-per-sample", "0.005", "--checkpoint", str(tmp_path / "ckpt.pt"),
                  "--final", str(tmp_path / "final.pt"))
    supervisor = Supervisor(job, "t", hub=socket_path, control_dir=tmp_path / "control", say=lambda _: None,
                            auto_replan=AutoReplan(min_speedup=1.2, max_restarts=1, settle_steps=10))
    assert supervisor.run() == 0, supervisor.message
    assert supervisor.restarts == 1 and supervisor.plan is not None and supervisor.plan.plan_id == "auto-1"
    stop = supervisor.resume_step
    by_rank = traces(tmp_path / "trace")
    assert [e["step"] for e in by_rank[0]] == list(range(STEPS))
    after = [len(e["indices"]) for e in by_rank[2] if e["step"] >= stop]
    assert after and max(after) < 8  # the straggler lost samples; ranks 0 and 1 (both mostly waiting) took them
    assert all(len(entry["indices"]) + after[0] == 24 - len(other["indices"])
               for entry, other in zip([e for e in by_rank[0] if e["step"] >= stop],
                                       [e for e in by_rank[1] if e["step"] >= stop], strict=True))
    assert_final_equals_reference(tmp_path)


@pytest.mark.slow
def test_failed_checkpoint_aborts_the_restart_and_the_run_goes_on(tmp_path: Path, hub_socket) -> None:
    hub, socket_path = hub_socket
    (tmp_path / "trace").mkdir()
    supervisor, outcome = supervise(tmp_path, socket_path, command(
        tmp_path, "--step-sleep", "0.1", "--trace", str(tmp_path / "trace"),
        "--checkpoint", str(tmp_path / "missing-folder" / "ckpt.pt")))
    wait_for_step(hub, 8)
    assert hub.request_restart("t", NEW_PLAN)["ok"]
    outcome["thread"].join(timeout=240)
    assert outcome.get("code") == 0
    assert supervisor.restarts == 0 and "restart aborted" in hub.snapshot()["jobs"]["t"]["message"] or supervisor.restarts == 0
    steps = [entry["step"] for entry in traces(tmp_path / "trace")[0]]
    assert steps == list(range(STEPS)) and {e["plan"] for e in traces(tmp_path / "trace")[0]} == {"equal"}


def test_a_job_that_dies_is_reported_not_relaunched(tmp_path: Path, hub_socket) -> None:
    hub, socket_path = hub_socket
    supervisor, outcome = supervise(tmp_path, socket_path, [sys.executable, "-c", "import sys; sys.exit(3)"])
    outcome["thread"].join(timeout=30)
    assert outcome["code"] == 3 and supervisor.restarts == 0
    assert "exited with code 3" in supervisor.message


def test_restart_without_a_supervisor_or_with_a_bad_plan_is_refused(hub_socket) -> None:
    hub, _ = hub_socket
    assert "no supervisor" in hub.request_restart("nobody", NEW_PLAN)["message"]
    hub.supervisor_poll("t", {"state": "running"})
    bad = {**NEW_PLAN, "global_batch": 25}
    assert not hub.request_restart("t", bad)["ok"]
    nobody = {**NEW_PLAN, "ranks": [{**r, "samples": 0} for r in NEW_PLAN["ranks"]]}
    assert "at least one rank" in hub.request_restart("t", nobody)["message"]
