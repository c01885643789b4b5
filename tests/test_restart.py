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
from typing import Any

import pytest

from gpumix.agent.batch_split import GlobalBatchSampler
from gpumix.hub import Hub
from gpumix.run.auto_replan import AutoReplan
from gpumix.run.supervisor import Supervisor
from tests.conftest import wait_until

torch = pytest.importorskip("torch")
ROOT = Path(__file__).parents[1]
STEPS = 60
AUTO_STEPS = 160  # the auto re-plan test's run
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


def supervise(tmp_path: Path, socket_path: str, job_command: list[str], **options: Any) -> tuple[Supervisor, dict]:
    supervisor = Supervisor(job_command, "t", hub=socket_path, control_dir=tmp_path / "control", say=lambda _: None,
                            **options)
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


def run_reference(tmp_path: Path, steps: int = STEPS) -> None:
    """The uninterrupted equal-split run, without the agent: its final parameters are the truth."""
    reference = subprocess.run(command(tmp_path, "--final", str(tmp_path / "reference.pt"), "--checkpoint",
                                       str(tmp_path / "ref-ckpt.pt"), "--steps", str(steps)),
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
@pytest.mark.timeout(300)  # a hang guard: two 160-step runs, torchrun's start-up slow on a loaded box
def test_auto_replan_takes_samples_from_a_straggler_by_itself(tmp_path: Path, hub_socket) -> None:
    # Rank 2 computes 15 ms per sample more (a weaker card); nobody asks for a re-plan. On a loaded
    # 2-core box the other ranks' compute grows too: with 5 ms the looks predicted 1.00x (warm-up
    # figures), then 1.15x, under the 1.2x asked. AUTO_STEPS: room for looks CHECK_S apart past DDP's
    # first sampled timers (iterations 1-10, then every 100th).
    hub, socket_path = hub_socket
    run_reference(tmp_path, AUTO_STEPS)
    (tmp_path / "trace").mkdir()
    job = command(tmp_path, "--step-sleep", "0.05", "--trace", str(tmp_path / "trace"), "--slow-rank", "2",
                  "--slow-s-per-sample", "0.015", "--checkpoint", str(tmp_path / "ckpt.pt"),
                  "--final", str(tmp_path / "final.pt"), "--steps", str(AUTO_STEPS))
    supervisor = Supervisor(job, "t", hub=socket_path, control_dir=tmp_path / "control", say=lambda _: None,
                            auto_replan=AutoReplan(min_speedup=1.2, max_restarts=1, settle_steps=10))
    assert supervisor.run() == 0, supervisor.message
    assert supervisor.restarts == 1, " | ".join(supervisor.auto_replan.outcomes)
    assert supervisor.plan is not None and supervisor.plan.plan_id == "auto-1"
    stop = supervisor.resume_step
    by_rank = traces(tmp_path / "trace")
    assert [e["step"] for e in by_rank[0]] == list(range(AUTO_STEPS))
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
    assert supervisor.restarts == 0
    (outcome_line,) = [p["outcome"] for p in supervisor.plan_log if p["plan_id"] == "unequal"]
    assert outcome_line.startswith("restart aborted, the run goes on unchanged: checkpoint hook failed"), outcome_line
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


# -- `gpumix plan --apply` against a real hub whose job is supervised ---------------------------------

def reporting_job(hub: Hub, computes_s: tuple[float, ...]) -> None:
    """Ranks of job `t` reporting 32 samples in a 0.35 s step each, with these compute times."""
    from gpumix.hub.ranks import MEDIAN_WINDOW, parse_hello, parse_step

    for rank, compute_s in enumerate(computes_s):
        uuid = hub.snapshot()["gpus"][rank]["uuid"]
        key = hub.agent_hello(parse_hello({"rank": rank, "world_size": len(computes_s), "job": "t",
                                           "pid": 10 + rank, "gpu_uuid": uuid}))
        for step in range(MEDIAN_WINDOW + 20):
            hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.35, "samples": 32, "micro_batch": 16,
                                            "comm_s": 0.35 - compute_s, "data_wait_s": 0.0, "gradient_bytes": 1e8}))


class PollingSupervisor:
    """Stands where `gpumix run` would: reports to the hub (taking no plan) until stopped, then
    takes what was queued. Only the polls are needed to see what --apply hands over."""

    def __init__(self, hub: Hub) -> None:
        self.hub, self.done = hub, threading.Event()
        hub.supervisor_poll("t", self.status(False))
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    @staticmethod
    def status(accepts_plan: bool) -> dict:
        return {"state": "running", "pid": 4242, "accepts_plan": accepts_plan, "restarts": 0}

    def _poll(self) -> None:
        while not self.done.wait(0.3):
            self.hub.supervisor_poll("t", self.status(False))

    def take(self) -> dict | None:
        self.done.set()
        self.thread.join(5)
        return self.hub.supervisor_poll("t", self.status(True))["plan"]


def plan_cli(socket_path: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpumix.cli.main", "plan", "--hub", socket_path, "--job", "t",
                           "--apply", *extra], capture_output=True, text=True, timeout=120, env=dict(os.environ))


def test_apply_does_not_restart_into_the_current_split(hub_socket) -> None:
    hub, socket_path = hub_socket
    reporting_job(hub, (0.30, 0.30, 0.30))  # equal ranks: nothing beats the split they have
    supervisor = PollingSupervisor(hub)
    result = plan_cli(socket_path)
    assert result.returncode == 0, result.stderr
    assert "not applied: the current split stays; the job is not restarted" in result.stdout
    assert supervisor.take() is None, "a kept_current plan was queued for a restart"


def test_apply_with_another_global_batch_is_refused_in_one_line(hub_socket) -> None:
    hub, socket_path = hub_socket
    reporting_job(hub, (0.30, 0.10, 0.05))  # 3 x 32 = 96 samples a step
    supervisor = PollingSupervisor(hub)
    result = plan_cli(socket_path, "--global-batch", "120")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "gpumix: not applied: --global-batch 120 is not the job's 96: a restart keeps the global batch"
        " (change it with a fresh start)"]
    assert supervisor.take() is None


def test_deepspeed_apply_hands_each_rank_its_config_with_one_accumulation(hub_socket, tmp_path: Path) -> None:
    from gpumix.wire.plan_file import RunPlan

    hub, socket_path = hub_socket
    reporting_job(hub, (0.30, 0.10, 0.05))
    (tmp_path / "base.json").write_text(json.dumps({"zero_optimization": {"stage": 2}, "gradient_clipping": 1.0}))
    supervisor = PollingSupervisor(hub)
    result = plan_cli(socket_path, "--deepspeed-config", str(tmp_path / "base.json"), "--out", str(tmp_path / "ds"),
                      "--json")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    handed = supervisor.take()
    assert handed is not None
    plan = RunPlan.from_json(handed)
    k = printed["deepspeed"]["accumulation_steps"]
    assert {share.accumulation_steps for share in plan.shares} == {k}  # ZeRO-2/3 need one k
    assert plan.global_batch == 96 and sum(plan.samples_per_rank) == 96
    assert plan.samples_per_rank == [r["samples"] for r in printed["deepspeed"]["ranks"]]
    assert plan.deepspeed_configs is not None and len(plan.deepspeed_configs) == 3
    for rank, share in enumerate(plan.shares):
        path = Path(plan.deepspeed_config(rank))
        assert path.is_absolute() and path.parent == (tmp_path / "ds").resolve()
        config = json.loads(path.read_text())
        assert config["train_micro_batch_size_per_gpu"] == share.micro_batch
        assert config["gradient_accumulation_steps"] == k and share.micro_batch * k == share.samples
        assert config["zero_optimization"] == {"stage": 2} and config["gradient_clipping"] == 1.0


@pytest.mark.slow
def test_a_stair_probe_trains_the_same_global_batches_and_the_hub_keeps_its_points(tmp_path: Path, hub_socket) -> None:
    """`gpumix run --granularity 2 --stair-probe` on 3 ranks of 8: the script takes the request from its
    environment (requested_probe_steps), so the first 88 steps run the probe's splits (each rank at 8 +- 2
    and +- 4), every step still trains its global batch, the parameters end as the equal split's, and the hub,
    fed by the real agents, keeps a point marked "probe" at each count each rank ran. Rank 0 sleeps 3 ms a
    sample: its points are its sleep's, and rank 1's are its own compute, not the wait for rank 0 that
    DDP's sampled timers would leave in them (gpumix.agent.ddp.compute_apart)."""
    hub, socket_path = hub_socket
    steps = 100  # the probe's 8 splits of 11 steps, then the split's own
    run_reference(tmp_path, steps)
    (tmp_path / "trace").mkdir()
    supervisor, outcome = supervise(tmp_path, socket_path, command(
        tmp_path, "--steps", str(steps), "--slow-rank", "0", "--slow-s-per-sample", "0.003", "--trace", str(tmp_path / "trace"),
        "--checkpoint", str(tmp_path / "ckpt.pt"), "--final", str(tmp_path / "final.pt")), granularity=2, stair_probe=True)
    outcome["thread"].join(timeout=240)
    assert outcome.get("code") == 0, supervisor.message

    by_rank = traces(tmp_path / "trace")
    counts = {rank: [len(e["indices"]) for e in entries] for rank, entries in by_rank.items()}
    assert counts[0][:88] == [10] * 11 + [6] * 11 + [12] * 11 + [4] * 11 + [6] * 11 + [10] * 11 + [4] * 11 + [12] * 11
    assert counts[2][:88] == [8] * 44 + [10] * 11 + [6] * 11 + [12] * 11 + [4] * 11
    assert all(counts[rank][88:] == [8] * (steps - 88) for rank in range(3))
    order = GlobalBatchSampler(2400, [24], 0, seed=7).permutation()
    for step in range(steps):
        batch = [i for rank in by_rank.values() for entry in rank if entry["step"] == step for i in entry["indices"]]
        assert sorted(batch) == sorted(order[step * 24:(step + 1) * 24]), step
    assert_final_equals_reference(tmp_path)

    def probe_points(key: str = "compute_s") -> dict[int, dict[float, float]]:
        return {r["rank"]: {p["samples"]: p[key] for p in r["points"] if p.get("probe")}
                for r in hub.snapshot()["ranks"] if r["job"] == "t"}
    # rank 2 also leaves 8: it ran 8 while ranks 0 and 1 traded, then left it for its own trades
    expected = {0: [4, 6, 10, 12], 1: [4, 6, 10, 12], 2: [4, 6, 8, 10, 12]}
    assert wait_until(lambda: all(sorted(probe_points().get(r, {})) == expected[r] for r in range(3)), 10), \
        probe_points()
    points = probe_points()
    sleeps = [points[0][n] for n in (4, 6, 10, 12)]
    assert sleeps == sorted(sleeps) and sleeps[0] > 0.003 * 4 * 0.9, sleeps  # rank 0's sleep, growing with n
    assert all(points[1][n] < 0.5 * points[0][n] for n in (4, 6, 10, 12)), points  # rank 1's own compute
    # each point's passes are those its steps ran (probe_micro_batch: even passes within the split's 8
    # without a GPU's memory figures), not the split's micro-batch of 8 the agent holds
    assert probe_points("micro_batch")[0] == {4: 4, 6: 6, 10: 5, 12: 6}
