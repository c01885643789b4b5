"""The command lines as a user runs them: real processes, one-line errors, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOP = [sys.executable, "-m", "gpumix.tui.main"]
TOOL = [sys.executable, "-m", "gpumix.cli.main"]


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, env={**os.environ, **env})


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_once_json_demo() -> None:
    result = run([*TOP, "--demo", "--once", "--json"])
    assert result.returncode == 0, result.stderr
    snapshot = json.loads(result.stdout)
    assert {"gpus", "host", "p2p", "ranks", "findings", "plan"} <= set(snapshot)
    assert len(snapshot["gpus"]) == 10
    gpu = snapshot["gpus"][9]
    assert gpu["name"] == "NVIDIA GeForce RTX 4090" and gpu["pcie_link_gen_current"] == 4
    assert gpu["pcie_rx_bytes_per_s"] > 0 and gpu["power_w"] <= gpu["power_cap_w"]


def test_once_text_with_shipped_sim_rig() -> None:
    rig = Path(__file__).parents[1] / "gpumix" / "rigs" / "rtx5070ti_x2.toml"
    result = run([*TOP, "--sim", str(rig), "--once"])
    assert result.returncode == 0, result.stderr
    assert "RTX 5070 Ti 16G" in result.stdout and "5x16/5x16" in result.stdout and "4x4/4x4" in result.stdout


def test_no_driver_says_so_and_suggests_demo() -> None:
    result = run([*TOP, "--once"])  # this machine has no NVIDIA driver
    assert_one_line_error(result, "no NVIDIA driver", "--demo")


def test_bad_rig_file(tmp_path: Path) -> None:
    rig = tmp_path / "bad.toml"
    rig.write_text('name = "x"\n[[gpus]]\nmodel = "rtx3090"\nslot_width = 12\n')
    assert_one_line_error(run([*TOP, "--sim", str(rig), "--once"]), f"{rig}:4: gpus[0].slot_width")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--interval", "0"], "must be positive"),
        (["--interval", "fast"], "not a number"),
        (["--demo", "--sim", "x.toml"], "not allowed with"),
        (["--json"], "--json needs --once"),
    ],
)
def test_bad_flags(args: list[str], fragment: str) -> None:
    assert_one_line_error(run([*TOP, *args]), fragment)


def test_tool_rigs_and_topo() -> None:
    rigs = run([*TOOL, "rigs"])
    assert rigs.returncode == 0 and "mixed-10" in rigs.stdout and "4090-x2-desktop" in rigs.stdout
    topo = run([*TOOL, "topo", "--demo", "--json"])
    links = json.loads(topo.stdout)
    assert len(links) == 45 and {link["read"] for link in links} == {"GPU not supported"}
    text = run([*TOOL, "topo", "--demo"]).stdout
    assert "P2P read" in text and "0 of 45 pairs can use P2P" in text


def test_tool_without_subcommand_is_one_line() -> None:
    assert_one_line_error(run(TOOL), "required")


def test_demo_once_includes_the_demo_ranks_and_their_straggler_tier() -> None:
    result = run([*TOP, "--demo", "--once", "--json"])
    snapshot = json.loads(result.stdout)
    ranks = {rank["rank"]: rank for rank in snapshot["ranks"]}
    assert sorted(ranks) == list(range(10))
    tier_of = {gpu["uuid"]: gpu["tier"] for gpu in snapshot["gpus"]}
    for rank in ranks.values():
        assert rank["step_time_s"] > 0 and rank["samples_per_s"] > 0 and rank["comm_share"] is not None
    stragglers = {tier_of[r["gpu_uuid"]] for r in ranks.values() if r["straggler"]}
    assert stragglers == {"RTX 3060 12G"}
    # the fast tier waits in the all-reduce for the slow one
    assert min(r["comm_share"] for r in ranks.values() if tier_of[r["gpu_uuid"]] == "RTX 4090 24G") > 0.5
    assert snapshot["run"]["stragglers"] == [0, 1, 2]


def test_headless_hub_serves_snapshots_and_stops_cleanly(tmp_path: Path) -> None:
    import signal

    from gpumix.hub.client import HubClient
    from tests.waiting import wait_until

    sock = f"/tmp/gpumix-test-{os.getpid()}.sock"
    hub = subprocess.Popen([*TOOL, "hub", "--demo", "--socket", sock, "--interval", "0.2"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "listening on" in hub.stdout.readline()
        assert_one_line_error(run([*TOOL, "hub", "--demo", "--socket", sock]), "already listens")
        client = HubClient(sock)
        snapshot = wait_until(lambda: (s := client.snapshot()) and len(s["ranks"]) == 10 and s, 60, "10 demo ranks")
        assert snapshot and len(snapshot["ranks"]) == 10 and len(snapshot["gpus"]) == 10
        assert len(client.series(0, "power_w")) >= 1
        client.close()
    finally:
        hub.send_signal(signal.SIGTERM)
        assert hub.wait(timeout=15) == 0
    assert not os.path.exists(sock)
