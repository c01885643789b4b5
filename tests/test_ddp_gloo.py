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
from tests.conftest import wait_until

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
        job = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3",
             str(ROOT / "examples" / "ddp_train.py"), "--steps", "130", "--width", "256"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        # while the ranks live the snapshot carries their versions (a gone rank's row drops them)
        live = wait_until(lambda: [r for r in (hub.snapshot() or {}).get("ranks", []) if r["connected"]], 120)
        _, stderr = job.communicate(timeout=180)
        assert job.returncode == 0, stderr[-3000:]
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
        assert not rank["connected"]  # the job ended: bye
    assert live and all(r["versions"]["torch"] == torch.__version__ for r in live)
