"""`gpumix power profile` (issue 16, item 4) on the demo rig's simulated NVML, as a user runs it: real
hubs on real sockets, the demo job's real processes, the command in its own process and real signals.
The caps come back however the profile ends; a dry run sends nothing; the hub learns each card's
power curve from the steps it sees at each cap, and the fit uses it."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from gpumix.cli.hardware import open_hardware
from gpumix.cli.node import Node, start_node
from gpumix.hub import Hub
from gpumix.hub.cap_samples import MAX_KEYS_PER_GPU, CapSamples
from gpumix.hub.client import HubClient
from gpumix.hub.ranks import MEDIAN_WINDOW, parse_hello, parse_step
from gpumix.hub.server import HubServer
from gpumix.power.caps import audit_log_path
from gpumix.power.profile import ProfileError, Profiler, profile_steps
from gpumix.power.snapshot_inputs import gpu_power_from_snapshot
from tests.conftest import ManualClock
from tests.waiting import wait_until

TOOL = [sys.executable, "-m", "gpumix.cli.main"]
THE_3090S = (3, 4, 5, 6)  # the demo rig's RTX 3090 tier


def caps(hub: Hub) -> dict[int, float]:
    return {g["index"]: g["power_cap_w"] for g in hub.snapshot()["gpus"]}


def audit_lines() -> list[dict[str, Any]]:
    path = audit_log_path()
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def profile(sock: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*TOOL, "power", "profile", "rtx3090", "--hub", sock, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def demo_node() -> Iterator[Node]:
    """The demo rig, its hub on a socket and the demo job training on every GPU."""
    node = start_node(open_hardware(demo=True), f"/tmp/gpumix-profile-{os.getpid()}.sock", interval_s=0.5, demo=True)
    try:
        wait_until(lambda: sum(1 for r in (node.hub.snapshot() or {"ranks": []})["ranks"] if r["connected"] and r["step"]) == 10,
                   90,
                   "the demo's ten ranks stepping")
        yield node
    finally:
        node.stop()


def stepped_down(hub: Hub, before: dict[int, float]) -> bool:
    now = caps(hub)
    return all(now[i] < before[i] for i in THE_3090S)


# -- the command -------------------------------------------------------------------------------


def test_dry_run_prints_the_steps_and_changes_nothing(hub_socket: tuple[Hub, str]) -> None:
    hub, sock = hub_socket
    before = caps(hub)
    done = subprocess.run([*TOOL, "power", "profile", "rtx3090", "--hub", sock, "--dry-run", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["applied"] is False and plan["gpus"] == list(THE_3090S)
    # four steps of 10 % of the 3090's 350 W default limit below its 350 W cap
    assert [step["caps_w"]["3"] for step in plan["steps"]] == [315, 280, 245, 210]
    assert caps(hub) == before and audit_lines() == []


def card(index: int, cap_w: float, default_w: float | None, min_w: float, max_w: float) -> dict[str, Any]:
    return {"index": index, "power_cap_w": cap_w, "power_limit_default_w": default_w,
            "power_limit_min_w": min_w, "power_limit_max_w": max_w}


def test_the_default_steps_reach_where_the_fit_cuts_on_narrow_and_wide_ranges() -> None:
    # Steps are shares of the default limit: a 5070 Ti (250-350 W range, 300 W default) reaches its
    # minimum, where shares of its narrow range held it at 270 W; a 4090 (150-600 W, 450 W) reaches 270 W
    # (the oracle's caps for both in the simulated world: 250-261 W and 250-266 W, docs/power.md).
    steps = profile_steps([card(0, 300, 300, 250, 350), card(1, 450, 450, 150, 600)], 4, 0.10)
    assert [step[0] for step in steps] == [270, 250, 250, 250]
    assert [step[1] for step in steps] == [405, 360, 315, 270]
    # a card that reports no default limit steps in shares of its cap now; never below its minimum
    assert [step[2] for step in profile_steps([card(2, 200, None, 100, 250)], 4, 0.25)] == [150, 100]


def test_completion_restores_the_caps_and_the_fit_learns_the_tier(demo_node: Node) -> None:
    hub = demo_node.hub
    before = caps(hub)
    done = profile(demo_node.server.socket_path, "--steps", "2", "--hold", "2", "--json")
    out, err = done.communicate(timeout=120)
    assert done.returncode == 0, err
    result = json.loads(out)
    assert result["restored"] is True and caps(hub) == before
    assert [m["caps_w"]["3"] for m in result["measured"]] == [350, 315, 280]  # 10 % of its 350 W default limit
    assert all(m["samples_per_s"] for m in result["measured"])
    lines = audit_lines()  # every change audited: two steps and the restore, four cards each
    assert len(lines) == 12 and [(x["gpu_index"], x["new_w"]) for x in lines[-4:]] == [(i, before[i]) for i in THE_3090S]
    # the hub filed the steps under each cap: the fit's curve for the 3090s is learned, not the prior
    fit = hub.control({"type": "power", "action": "fit", "budget_w": 2400, "dry_run": True})["fit"]
    curves = {g["index"]: g["basis"].get("curve") for g in fit["gpus"]}
    assert {curves[i] for i in THE_3090S} == {"learned"}, curves
    assert curves[0] != "learned" and caps(hub) == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_profile_and_restores_the_caps(demo_node: Node, signum: int) -> None:
    hub = demo_node.hub
    before = caps(hub)
    running = profile(demo_node.server.socket_path, "--hold", "60")
    wait_until(lambda: stepped_down(hub, before), 60, "the first step's caps")
    running.send_signal(signum)
    _, err = running.communicate(timeout=60)
    assert running.returncode == 128 + signum, err
    assert err.strip().splitlines()[-1] == \
        f"gpumix: interrupted ({signal.Signals(signum).name}); the original caps are restored"
    assert caps(hub) == before


def test_a_lost_hub_is_waited_for_and_the_caps_put_back(demo_node: Node) -> None:
    hub, server = demo_node.hub, demo_node.server
    before = caps(hub)
    running = profile(server.socket_path, "--hold", "60", "--restore-wait", "60")
    wait_until(lambda: stepped_down(hub, before), 60, "the first step's caps")
    server.stop()  # the hub process goes away; a real card keeps its cap (the simulated machine here)
    assert stepped_down(hub, before)
    while "stopped answering" not in (line := running.stderr.readline()):  # the profile noticed
        assert line, "the profile ended without saying the hub stopped answering"
    again = HubServer(hub, server.socket_path)  # a hub back on the same socket
    again.start()
    try:
        _, err = running.communicate(timeout=90)
        assert running.returncode == 1, err
        assert "the hub stopped answering" in err and err.strip().endswith("the original caps are restored")
        assert caps(hub) == before
    finally:
        again.stop()


def test_a_hub_that_never_comes_back_leaves_one_line_naming_the_caps(demo_node: Node) -> None:
    hub, server = demo_node.hub, demo_node.server
    before = caps(hub)
    running = profile(server.socket_path, "--hold", "60", "--restore-wait", "1")
    wait_until(lambda: stepped_down(hub, before), 60, "the first step's caps")
    server.stop()
    _, err = running.communicate(timeout=60)
    assert running.returncode == 1 and "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert "caps NOT restored" in line and "gpumix power set 3 350" in line and "gpumix power set 6 390" in line


def test_a_read_only_client_is_refused_and_nothing_changes(demo_node: Node) -> None:
    hub = demo_node.hub
    before = caps(hub)
    client = HubClient(demo_node.server.socket_path, readonly=True)
    try:
        profiler = Profiler(client, restore_wait_s=1.0)
        run = profiler.prepare("rtx3090", steps=1, share=0.1, hold_s=1.0)
        with pytest.raises(ProfileError, match="refused"):
            profiler.run(run)
    finally:
        client.close()
    assert run.restored is None and caps(hub) == before and audit_lines() == []


# -- the learned curve -------------------------------------------------------------------------


def steps_at(hub: Hub, clock: ManualClock, key: Any, compute_s: float, first: int, count: int = MEDIAN_WINDOW) -> None:
    for step in range(first, first + count):
        hub.agent_step(key, parse_step({"step": step, "step_time_s": compute_s + 0.05, "samples": 64,
                                        "micro_batch": 64, "comm_s": 0.05, "data_wait_s": 0.0}))
        clock.advance(compute_s + 0.05)


def test_the_fit_uses_a_curve_learned_at_two_caps_for_the_card_and_its_model(demo_hub: Hub, clock: ManualClock) -> None:
    uuids = [g["uuid"] for g in demo_hub.snapshot()["gpus"]]
    keys = [demo_hub.agent_hello(parse_hello({"rank": r, "world_size": 2, "job": "train", "pid": 100 + r,
                                              "gpu_uuid": uuids[gpu]})) for r, gpu in enumerate((3, 4))]
    steps_at(demo_hub, clock, keys[0], 0.30, 0)
    steps_at(demo_hub, clock, keys[1], 0.32, 0)
    prior = {g.index: g for g in gpu_power_from_snapshot({**demo_hub.snapshot(), "power_points": demo_hub.power_points()})}
    assert prior[3].power_curve().kind == "prior anchored at one cap"
    # GPU 3 at 250 W runs 1.5x slower: far below the prior's (250/350)^0.25 = 0.92 of its speed
    assert demo_hub.control({"type": "power", "action": "set", "gpus": [3], "watts": 250})["ok"]
    steps_at(demo_hub, clock, keys[0], 0.45, MEDIAN_WINDOW)
    assert demo_hub.control({"type": "power", "action": "set", "gpus": [3], "watts": 350})["ok"]
    steps_at(demo_hub, clock, keys[0], 0.30, 2 * MEDIAN_WINDOW)
    learned = {g.index: g for g in gpu_power_from_snapshot({**demo_hub.snapshot(),
                                                             "power_points": demo_hub.power_points()})}
    assert learned[3].power_curve().kind == "learned"
    assert math.isclose(learned[3].power_curve().time_ratio(350, 250), 1.5, rel_tol=0.02)
    assert prior[3].power_curve().time_ratio(350, 250) < 1.1  # the prediction changed
    # GPU 4 (another 3090, same cap) was never stepped: it takes GPU 3's curve, said so
    assert learned[4].power_curve().kind == "learned from GPU 3 (same model)"
    assert math.isclose(learned[4].power_curve().time_ratio(350, 250), 1.5, rel_tol=0.02)
    # GPU 7 (a 4090) runs no rank: nothing learned
    assert learned[7].power_curve().kind == "prior"
    reply = demo_hub.control({"type": "power", "action": "fit", "budget_w": 2900, "dry_run": True})
    by_index = {g["index"]: g for g in reply["fit"]["gpus"]}
    assert by_index[3]["basis"]["curve"] == "learned" and by_index[4]["basis"]["curve"].startswith("learned from")


def test_cap_samples_are_bounded_age_out_and_ignore_nonsense() -> None:
    samples = CapSamples()
    for cap in range(MAX_KEYS_PER_GPU + 5):
        for _ in range(3):
            samples.add("GPU-a", 100.0 + cap, 64, 0.3, 0.35, now_s=10.0)
    rows = samples.view(10.0)["GPU-a"]
    assert len(rows) == MAX_KEYS_PER_GPU and min(r["cap_w"] for r in rows) == 105.0  # the oldest went first
    for bad in (math.nan, math.inf, -1.0, 1e9):
        samples.add("GPU-b", bad, 64, 0.3, 0.35, now_s=10.0)
        samples.add("GPU-b", 300.0, 64, bad, 0.35, now_s=10.0)
    assert "GPU-b" not in samples.view(10.0)
    assert samples.view(10.0 + 1801.0) == {}  # not seen for 30 min: forgotten
