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


def run_example(demo_hardware, tmp_path: Path, command: list[str]) -> list[dict]:
    hub = Hub(demo_hardware)
    hub.tick()
    sock = f"/tmp/gpumix-int-{os.getpid()}.sock"
    server = HubServer(hub, sock)
    server.start()
    try:
        env = {**os.environ, "GPUMIX_HUB": sock, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-4000:]
        return sorted(hub.snapshot()["ranks"], key=lambda rank: rank["rank"])
    finally:
        server.stop()


@pytest.mark.slow
def test_hugging_face_trainer(demo_hardware, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    ranks = run_example(demo_hardware, tmp_path, [sys.executable, str(ROOT / "examples" / "hf_trainer.py"), "--steps", "12"])
    (rank,) = ranks
    assert rank["job"] == "hf-example" and rank["step"] == 11
    assert rank["micro_batch"] == 16 and rank["accumulation_steps"] == 2
    assert rank["samples_per_s"] > 0 and rank["loss"] is not None and 0 < rank["loss"] < 5


@pytest.mark.slow
def test_lightning(demo_hardware, tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    ranks = run_example(demo_hardware, tmp_path, [sys.executable, str(ROOT / "examples" / "lightning_train.py"), "--steps", "12"])
    (rank,) = ranks
    assert rank["job"] == "lightning-example" and rank["step"] == 11
    assert rank["micro_batch"] == 32 and rank["loss"] is not None and rank["samples_per_s"] > 0


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
