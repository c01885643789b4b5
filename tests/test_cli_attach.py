"""One-shot commands read the running hub when there is one (instant: its rates, ranks and findings),
say so on stderr, and act through its controls; without one they read the GPUs themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumix.hub.client import HubClient

TOOL = [sys.executable, "-m", "gpumix.cli.main"]
TOP = [sys.executable, "-m", "gpumix.tui.main"]


@pytest.fixture
def running_hub(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """`gpumix hub --sim mixed-10` at $GPUMIX_HUB: what a plain command on this box finds."""
    socket_path = str(tmp_path / "hub.sock")
    env = {**os.environ, "GPUMIX_HUB": socket_path, "XDG_RUNTIME_DIR": str(tmp_path)}
    hub = subprocess.Popen([*TOOL, "hub", "--sim", "mixed-10", "--socket", socket_path, "--interval", "0.2"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert "listening on" in hub.stdout.readline()
        yield socket_path, env
    finally:
        hub.terminate()
        hub.wait(30)


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=90, env=env)


def test_power_show_and_doctor_read_the_running_hub(running_hub: tuple[str, dict[str, str]]) -> None:
    socket_path, env = running_hub
    show = run([*TOOL, "power", "show", "--json"], env)  # no --sim: without the hub this is NVML ("no driver")
    assert show.returncode == 0, show.stderr
    assert len(json.loads(show.stdout)) == 10
    assert show.stderr.strip() == f"gpumix: using the running hub at {socket_path}"
    doctor = run([*TOOL, "doctor", "--json"], env)
    assert doctor.returncode in (0, 1), doctor.stderr
    assert {f["id"] for f in json.loads(doctor.stdout)["findings"]}  # the rig's P2P and link findings
    assert "using the running hub" in doctor.stderr


def test_power_set_acts_through_the_hub_and_the_hub_shows_it(running_hub: tuple[str, dict[str, str]]) -> None:
    socket_path, env = running_hub
    result = run([*TOOL, "power", "set", "3", "300", "--json"], env)
    assert result.returncode == 0, result.stderr
    change = json.loads(result.stdout)
    assert change["new_w"] == 300 and change["cap_now_w"] == 300 and change["dry_run"] is False
    client = HubClient(socket_path)
    try:
        assert client.snapshot()["gpus"][3]["power_cap_w"] == 300  # the hub's GPU, not a copy in the command
    finally:
        client.close()
    dry = run([*TOOL, "power", "--dry-run", "set", "3", "200", "--json"], env)
    assert json.loads(dry.stdout)["cap_now_w"] is None
    refused = run([*TOOL, "power", "set", "3", "9999"], env)
    assert refused.returncode == 1 and "outside that range" in refused.stderr.splitlines()[-1]


def test_once_reads_the_running_hub(running_hub: tuple[str, dict[str, str]]) -> None:
    socket_path, env = running_hub
    result = run([*TOP, "--once", "--json"], env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["source"] == "sim:mixed-10"  # without the hub: "no NVIDIA driver"
    assert result.stderr.strip() == f"gpumix-top: using the running hub at {socket_path}"


def test_an_explicit_hub_that_does_not_answer_says_why(tmp_path: Path) -> None:
    result = run([*TOOL, "power", "show", "--hub", str(tmp_path / "none.sock")], dict(os.environ))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "no hub answered" in result.stderr.strip().splitlines()[-1]
