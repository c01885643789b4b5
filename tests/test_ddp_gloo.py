"""Real torch DDP on CPU (gloo, 3 ranks via torchrun) with the real agent and hub."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpumix.hub import Hub
from gpumix.hub.server import HubServer

torch = pytest.importorskip("torch")
ROOT = Path(__file__).parents[1]


@pytest.mark.slow
def test_every_rank_reports_plausible_steps(demo_hardware, tmp_path: Path) -> None:
    hub = Hub(demo_hardware)
    hub.tick()
    server = HubServer(hub, tmp_path / "hub.sock")
    server.start()
    try:
        env = {**os.environ, "GPUMIX_HUB": str(tmp_path / "hub.sock"), "OMP_NUM_THREADS": "1"}
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3",
             str(ROOT / "examples" / "ddp_train.py"), "--steps", "130", "--width", "256"],
            capture_output=True, text=True, timeout=180, env=env,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        wall_s = time.monotonic() - started
        snapshot = hub.snapshot()
    finally:
        server.stop()
    ranks = sorted(snapshot["ranks"], key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2]
    for rank in ranks:
        assert rank["world_size"] == 3 and rank["job"] == "ddp-example"
        assert rank["step"] == 129, rank  # every step arrived, the last one at close
        assert 0 < rank["step_time_s"] < wall_s
        assert rank["samples_per_s"] > 0
        # from DDP's own timers (it samples iteration 100 and the first ten): on this oversubscribed
        # CPU one sampled all-reduce can outlast the median step, and the hub caps the share at 1
        assert rank["comm_share"] is not None and 0 < rank["comm_share"] <= 1
        assert rank["forward_s"] > 0 and rank["backward_s"] > 0
        assert rank["loss"] is not None and 0 < rank["loss"] < 10
        assert rank["rss_bytes"] > 10 * 1024**2
        assert rank["versions"]["torch"] == torch.__version__
        assert not rank["connected"]  # the job ended: bye
