"""The agent copies a CUDA loss on sampled steps only (agent/sampling.py: at most ten a second), so at a
fast step rate most steps carry none. The hub keeps the losses it received, not the steps that had
one: the sparkline's history and the row's loss come from them."""

from __future__ import annotations

from typing import Any

from gpumix.hub import Hub
from gpumix.hub.ranks import LOSS_HISTORY_KEPT, parse_hello, parse_step


def rank_row(hub: Hub) -> dict[str, Any]:
    return next(r for r in hub.snapshot()["ranks"] if r["rank"] == 0)


def test_sampled_losses_fill_the_history_and_the_row_shows_the_newest(demo_hub: Hub) -> None:
    uuid = demo_hub.snapshot()["gpus"][0]["uuid"]
    key = demo_hub.agent_hello(parse_hello({"rank": 0, "world_size": 1, "job": "train", "gpu_uuid": uuid}))
    sampled: dict[int, float] = {}
    for step in range(1000):  # 1 ms steps: one in a hundred sampled
        loss = {"loss": 5.0 - step / 1000} if step % 100 == 0 else {}
        sampled.update({step: loss["loss"]} if loss else {})
        demo_hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.001, "samples": 8, **loss}))
    row = rank_row(demo_hub)
    assert row["loss_history"] == list(sampled.values())  # all ten, though 900 steps passed since the first
    assert row["loss"] == sampled[900]  # the last step (999) carried none


def test_the_history_is_bounded(demo_hub: Hub) -> None:
    uuid = demo_hub.snapshot()["gpus"][0]["uuid"]
    key = demo_hub.agent_hello(parse_hello({"rank": 0, "world_size": 1, "job": "train", "gpu_uuid": uuid}))
    for step in range(3 * LOSS_HISTORY_KEPT):
        demo_hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.1, "samples": 8, "loss": float(step)}))
    row = rank_row(demo_hub)
    assert row["loss_history"] == [float(s) for s in range(2 * LOSS_HISTORY_KEPT, 3 * LOSS_HISTORY_KEPT)]
    assert row["loss"] == float(3 * LOSS_HISTORY_KEPT - 1)
