"""Each framework integration, run for real as its example, reporting to a real hub."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpumix.hub import Hub
from gpumix.hub.server import HubServer

ROOT = Path(__file__).parents[1]


def run_example(demo_hardware, tmp_path: Path, command: list[str], env: dict[str, str] | None = None) -> list[dict]:
    hub = Hub(demo_hardware)
    hub.tick()
    sock = f"/tmp/gpumix-int-{os.getpid()}.sock"
    server = HubServer(hub, sock)
    server.start()
    try:
        env = {**os.environ, "GPUMIX_HUB": sock, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
               **(env or {})}
        result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-4000:]
        return sorted(hub.snapshot()["ranks"], key=lambda rank: rank["rank"])
    finally:
        server.stop()


def fp32(rank: dict) -> bool:
    """The integration reported fp32 training by itself: autocast off, no loss scale."""
    return (rank.get("amp_autocast"), rank.get("amp_dtype"), rank.get("loss_scale")) == (0, "float32", None)


@pytest.mark.slow
def test_hugging_face_trainer(demo_hardware, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    ranks = run_example(demo_hardware, tmp_path, [sys.executable, str(ROOT / "examples" / "hf_trainer.py"), "--steps", "12"])
    (rank,) = ranks
    assert rank["job"] == "hf-example" and rank["step"] == 11
    assert rank["micro_batch"] == 16 and rank["accumulation_steps"] == 2
    assert rank["samples_per_s"] > 0 and rank["loss"] is not None and 0 < rank["loss"] < 5
    assert fp32(rank)  # the example trains without fp16/bf16: the callback says so by itself


@pytest.mark.slow
def test_lightning(demo_hardware, tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    ranks = run_example(demo_hardware, tmp_path, [sys.executable, str(ROOT / "examples" / "lightning_train.py"), "--steps", "12"])
    (rank,) = ranks
    assert rank["job"] == "lightning-example" and rank["step"] == 11
    assert rank["micro_batch"] == 32 and rank["loss"] is not None and rank["samples_per_s"] > 0
    assert fp32(rank)  # precision "32-true" by default


@pytest.mark.slow
def test_deepspeed_engine(demo_hardware, tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    ranks = run_example(demo_hardware, tmp_path, [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(ROOT / "examples" / "deepspeed_train.py"), "--steps", "10"])
    assert [rank["rank"] for rank in ranks] == [0, 1]
    for rank in ranks:
        assert rank["job"] == "deepspeed-example" and rank["step"] == 9
        assert rank["micro_batch"] == 8 and rank["accumulation_steps"] == 2
        assert rank["comm_share"] is not None and rank["comm_share"] > 0  # DeepSpeed's bwd_allreduce timer
        assert rank["loss"] is not None
        assert fp32(rank)  # neither fp16 nor bf16 in its config



@pytest.mark.slow
def test_deepspeed_under_an_unequal_plan_counts_the_samples_trained(demo_hardware, tmp_path: Path) -> None:
    """Each rank starts from its config of the plan (m = 2 and 4, one k = 2, B = 12). DeepSpeed's
    own check needs train_batch_size = m_r * k * R per rank (8 and 16); the integration makes
    engine.global_samples count the 12 samples each step trains, on every rank."""
    import json

    pytest.importorskip("deepspeed")
    from gpumix.plan.deepspeed import deepspeed_split, write_configs
    from gpumix.wire.plan_file import PLAN_ENV

    split = deepspeed_split({"global_batch": 12, "ranks": [
        {"rank": 0, "samples": 4, "micro_batch": 2, "accumulation_steps": 2, "loss_weight": 0.0},
        {"rank": 1, "samples": 8, "micro_batch": 4, "accumulation_steps": 2, "loss_weight": 0.0}]})
    base = {"optimizer": {"type": "SGD", "params": {"lr": 0.01}}, "zero_optimization": {"stage": 0},
            "wall_clock_breakdown": True, "steps_per_print": 10**9}
    configs = write_configs(split, base, tmp_path / "ds")
    plan = {"plan_id": "ds", "global_batch": 12, "ranks": split["ranks"],
            "deepspeed_configs": [str(path.resolve()) for path in configs]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "counts").mkdir()
    ranks = run_example(demo_hardware, tmp_path, [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(ROOT / "examples" / "deepspeed_train.py"), "--steps", "10", "--samples-out", str(tmp_path / "counts")],
        env={PLAN_ENV: str(tmp_path / "plan.json")})
    assert [(r["micro_batch"], r["accumulation_steps"]) for r in ranks] == [(2, 2), (4, 2)]
    for rank in (0, 1):
        counts = json.loads((tmp_path / "counts" / f"rank{rank}.json").read_text())
        assert counts == {"global_samples": 10 * 12, "global_steps": 10}, rank


@pytest.mark.slow
@pytest.mark.parametrize("zero", [0, 2, 3])
def test_a_deepspeed_stair_probe_trains_the_global_batches_and_leaves_the_passes_it_ran(
        demo_hardware, tmp_path: Path, zero: int) -> None:
    """`gpumix run --stair-probe` asks a DeepSpeed job (ZeRO 0, 2 and 3; 2 gloo ranks, m = 8, k = 2: 16 each, B = 32) for a
    probe with a granule of 3: rounded up to k's multiple, 4, the ranks trade 4 and 8 samples for 11 steps
    each, in the same k = 2 micro-batches (DeepSpeed steps at each k-th), each micro-batch's loss weighed by
    its own samples x k x R / B. The 50 steps end with the parameters of the run without a probe, DeepSpeed
    counts 32 samples a step, and the hub keeps each probe count's point with the micro-batch it ran."""
    import json

    import torch

    pytest.importorskip("deepspeed")
    from gpumix.wire.plan_file import STAIR_PROBE_ENV

    def run(name: str, env: dict[str, str]) -> list[dict]:
        (tmp_path / name).mkdir()
        return run_example(demo_hardware, tmp_path, [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            str(ROOT / "examples" / "deepspeed_train.py"), "--zero", str(zero), "--steps", "50",
            "--final", str(tmp_path / name / "final.pt"),
            "--samples-out", str(tmp_path / name)], env=env)

    run("plain", {})
    ranks = run("probed", {STAIR_PROBE_ENV: "3"})
    for rank in ranks:
        probed = {p["samples"]: p["micro_batch"] for p in rank["points"] if p.get("probe")}
        assert probed == {8: 4, 12: 6, 20: 10, 24: 12}, (rank["rank"], rank["points"])
        assert rank["micro_batch"] == 8 and rank["samples"] == 16  # back on the split after the probe
        counts = json.loads((tmp_path / "probed" / f"rank{rank['rank']}.json").read_text())
        assert counts == {"global_samples": 50 * 32, "global_steps": 50}
    plain, probed = (torch.load(tmp_path / name / "final.pt") for name in ("plain", "probed"))
    for name, value in plain.items():
        torch.testing.assert_close(probed[name], value, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow
def test_deepspeed_restarts_into_its_configs_under_gpumix_run(hub_socket, tmp_path: Path) -> None:
    """`gpumix run` restarts a DeepSpeed job (2 gloo ranks, m = 8 and k = 2: B = 32) into the
    DeepSpeed split [8, 24] (m = 4 and 12, the same k = 2) that `gpumix plan --deepspeed-config
    --apply` hands over: each rank starts from its own config, from DeepSpeed's checkpoint, and
    DeepSpeed counts 32 samples for every one of the 30 steps, before the restart and after."""
    import json
    import threading

    pytest.importorskip("deepspeed")
    from gpumix.plan.deepspeed import deepspeed_split, write_configs
    from gpumix.run.supervisor import Supervisor
    from tests.conftest import wait_until

    hub, socket_path = hub_socket
    job = "deepspeed-example"
    (tmp_path / "counts").mkdir()
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(ROOT / "examples" / "deepspeed_train.py"), "--steps", "30", "--step-sleep", "0.1",
               "--checkpoint", str(tmp_path / "ckpt"), "--samples-out", str(tmp_path / "counts")]
    supervisor = Supervisor(command, job, hub=socket_path, control_dir=tmp_path / "control", say=lambda _: None)
    outcome: dict = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("code", supervisor.run()), daemon=True)
    thread.start()

    def ranks() -> list[dict]:
        return sorted((r for r in hub.snapshot()["ranks"] if r["job"] == job and r["connected"]), key=lambda r: r["rank"])

    assert wait_until(lambda: len(ranks()) == 2 and min(r["step"] or 0 for r in ranks()) >= 4, 180), supervisor.message
    split = deepspeed_split({"global_batch": 32, "ranks": [
        {"rank": 0, "samples": 8, "micro_batch": 8, "accumulation_steps": 1, "loss_weight": 0.5},
        {"rank": 1, "samples": 24, "micro_batch": 12, "accumulation_steps": 2, "loss_weight": 1.5}]})
    base = {"optimizer": {"type": "SGD", "params": {"lr": 0.01}}, "zero_optimization": {"stage": 0},
            "wall_clock_breakdown": True, "steps_per_print": 10**9}
    configs = write_configs(split, base, tmp_path / "ds")
    plan = {"plan_id": "ds", "global_batch": 32, "ranks": split["ranks"],
            "deepspeed_configs": [str(path.resolve()) for path in configs]}
    assert hub.request_restart(job, plan)["ok"]
    thread.join(timeout=300)
    assert outcome.get("code") == 0, supervisor.message
    assert supervisor.restarts == 1 and supervisor.plan is not None and supervisor.plan.plan_id == "ds"
    assert [(r["micro_batch"], r["accumulation_steps"]) for r in sorted(
        (r for r in hub.snapshot()["ranks"] if r["job"] == job and r["step"] == 29), key=lambda r: r["rank"])] == [
        (4, 2), (12, 2)]
    for rank in (0, 1):
        counts = json.loads((tmp_path / "counts" / f"rank{rank}.json").read_text())
        assert counts == {"global_samples": 30 * 32, "global_steps": 30}, rank
