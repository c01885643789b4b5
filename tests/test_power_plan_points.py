"""`gpumix plan` learns from the hub's power points (issue 16, items 4-5): the snapshot a client reads
carries the points at caps other than each card's cap now, so the joint offer stands on learned curves
and not the prior; a box whose caps never changed carries none (its snapshots stay as they were)."""

from __future__ import annotations

from typing import Any

from gpumix.cli.plan_joint import joint_json
from gpumix.hub import Hub
from gpumix.hub.client import HubClient
from gpumix.hub.ranks import MEDIAN_WINDOW, parse_hello, parse_step
from gpumix.plan.inputs import plan_from_snapshot
from gpumix.plan.planner import plan_to_json
from gpumix.power.snapshot_inputs import gpu_power_from_snapshot

GPUS = (3, 4)  # two of the demo rig's RTX 3090s (350 W stock)


def steps(hub: Hub, key: Any, compute_s: float, first: int) -> None:
    for step in range(first, first + MEDIAN_WINDOW):
        hub.agent_step(key, parse_step({"step": step, "step_time_s": compute_s + 0.05, "samples": 64,
                                        "micro_batch": 64, "comm_s": 0.05, "data_wait_s": 0.0}))


def set_cap(hub: Hub, index: int, watts: float) -> None:
    assert hub.control({"type": "power", "action": "set", "gpus": [index], "watts": watts})["ok"]


def test_the_snapshot_a_client_reads_carries_the_learned_power_points(hub_socket: tuple[Hub, str]) -> None:
    hub, path = hub_socket
    uuids = [g["uuid"] for g in hub.snapshot()["gpus"]]
    keys = [hub.agent_hello(parse_hello({"rank": r, "world_size": 2, "job": "train", "pid": 100 + r,
                                         "gpu_uuid": uuids[gpu]})) for r, gpu in enumerate(GPUS)]
    steps(hub, keys[0], 0.30, 0)
    steps(hub, keys[1], 0.32, 0)
    hub.tick()
    assert "power_points" not in hub.snapshot()  # no cap has changed: nothing to learn, nothing added
    set_cap(hub, 3, 250)  # GPU 3 at 250 W runs 1.5x slower, then back at its stock cap
    steps(hub, keys[0], 0.45, MEDIAN_WINDOW)
    set_cap(hub, 3, 350)
    steps(hub, keys[0], 0.30, 2 * MEDIAN_WINDOW)
    hub.tick()
    client = HubClient(path)
    try:
        snapshot = client.snapshot()
    finally:
        client.close()
    assert snapshot is not None
    rows = snapshot["power_points"][uuids[3]]
    assert [row["cap_w"] for row in rows] == [250.0]  # the cap in force is the rank's live figure, not sent
    curves = {g.index: g.power_curve() for g in gpu_power_from_snapshot(snapshot)}
    assert curves[3].kind == "learned" and curves[4].kind == "learned from GPU 3 (same model)"
    job, plan = plan_from_snapshot(snapshot, "train", None, 100e6, 16, frozenset())
    joint = joint_json(snapshot, job, {**plan_to_json(plan), "job": job}, 16)
    assert "power curves from the prior" not in joint["why"], joint["why"]
