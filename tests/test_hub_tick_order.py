"""A cap change is never undone on screen by a reading taken before it. The hub ticks on its sampling
thread and again at once after a control; CI at f3a8d89 saw the sampler's tick, begun before a profile
put the caps back, publish the stepped-down caps after the control's tick had shown the restored ones."""

from __future__ import annotations

import threading
from typing import Any

from gpumix.hub import Hub
from tests.conftest import ManualClock, ticked_hub


def caps(hub: Hub) -> dict[int, float]:
    snapshot = hub.snapshot()
    assert snapshot is not None
    return {g["index"]: g["power_cap_w"] for g in snapshot["gpus"]}


def test_a_tick_begun_before_a_cap_change_does_not_publish_over_the_change(demo_hardware, clock: ManualClock) -> None:
    hub = ticked_hub(demo_hardware, clock)
    backend = hub.hardware.backend
    read_it, go_on = threading.Event(), threading.Event()
    real_sample = backend.sample

    def sample_then_wait() -> Any:  # the sampler's reading, held back until the control has run
        samples = real_sample()
        if not read_it.is_set():
            read_it.set()
            go_on.wait(30)
        return samples

    backend.sample = sample_then_wait
    sampler = threading.Thread(target=hub.tick)
    sampler.start()
    assert read_it.wait(30), "the sampler's tick read the hardware"
    replies: list[dict[str, Any]] = []
    controller = threading.Thread(target=lambda: replies.append(
        hub.control({"type": "power", "action": "caps", "caps": {"3": 280}})))
    controller.start()
    controller.join(1.0)  # unfixed, the control's own tick is done by now; fixed, it waits for the sampler's
    go_on.set()
    sampler.join(30)
    controller.join(30)
    assert replies and replies[0]["ok"], replies
    assert caps(hub)[3] == 280.0  # unfixed: 350, the sampler's reading from before the change
