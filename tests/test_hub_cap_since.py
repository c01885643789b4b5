"""Steps are filed under a cap only if they ended after the hub first saw it (issue 16's learned power
curves, review of the 1 s send period): an agent's batch can hold a second of steps that ran under the
cap before, and the 16 steps a cap's median needs can all be such steps at 20 steps/s."""

from __future__ import annotations

from typing import Any

from gpumix.hub import Hub
from gpumix.hub.ranks import MEDIAN_WINDOW, parse_hello, parse_step

GPU = 3  # one of the demo rig's RTX 3090s (350 W stock)


def send(hub: Hub, key: Any, compute_s: float, first: int, ended_s: float | None) -> None:
    for step in range(first, first + MEDIAN_WINDOW):
        message = {"step": step, "step_time_s": compute_s + 0.05, "samples": 64, "micro_batch": 64,
                   "comm_s": 0.05, "data_wait_s": 0.0}
        if ended_s is not None:
            message["t"] = ended_s
        hub.agent_step(key, parse_step(message))


def compute_at(hub: Hub, uuid: str, cap_w: float) -> list[float]:
    return [row["compute_s"] for row in hub.power_points().get(uuid, []) if row["cap_w"] == cap_w]


def test_steps_that_ended_before_the_hub_saw_a_new_cap_are_not_filed_under_it(hub_socket: tuple[Hub, str]) -> None:
    hub, _ = hub_socket
    uuid = hub.snapshot()["gpus"][GPU]["uuid"]
    key = hub.agent_hello(parse_hello({"rank": 0, "world_size": 1, "job": "train", "pid": 100, "gpu_uuid": uuid}))
    assert hub.control({"type": "power", "action": "set", "gpus": [GPU], "watts": 250})["ok"]
    seen_s = hub.snapshot()["timestamp_s"]  # the tick that first showed 250 W
    send(hub, key, 0.30, 0, ended_s=seen_s - 0.5)  # a batch of steps that ran at 350 W, sent late
    assert compute_at(hub, uuid, 250.0) == []
    send(hub, key, 0.45, MEDIAN_WINDOW, ended_s=seen_s + 0.5)  # the steps that ran at 250 W
    assert compute_at(hub, uuid, 250.0) == [0.45]
    send(hub, key, 0.45, 2 * MEDIAN_WINDOW, ended_s=None)  # a step without its end time: filed as it comes
    assert compute_at(hub, uuid, 250.0) == [0.45]
