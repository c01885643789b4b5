"""The hub files one read's steps together (issue 13): AgentIntake.steps, with CapSamples.add_many and the
rank rows' skip of the GradScaler scan where no count came, gives what filing each step alone gave (the
loop as it was is kept here as the reference), on random steps, caps and cap changes."""

from __future__ import annotations

import random
from typing import Any

from gpumix.hub import Hub
from gpumix.hub.count_runs import follow
from gpumix.hub.intake import AgentIntake, log
from gpumix.hub.rank_table import RankKey, job_name
from gpumix.hub.ranks import POINTS_KEPT, parse_hello, parse_step
from gpumix.hw.hardware import Hardware
from tests.conftest import FixedHostSampler, ManualClock


def old_step(intake: AgentIntake, key: RankKey, step: dict[str, Any], now_s: float, caps_w: dict[str, float | None],
             cap_since_wall_s: dict[str, float] | None) -> bool:
    """AgentIntake.step before the batch: each step alone."""
    rejected = step.pop("rejected", ())
    stream = intake.table.for_connection(key)
    if stream is None:
        return False
    stream.last_seen_s = now_s
    if rejected:
        if not stream.rejected_values:
            log.warning("hub: rank %d of %s sent %s out of range", stream.rank, job_name(stream.job, stream.run_id),
                        ", ".join(rejected))
        stream.rejected_values += len(rejected)
    if step["step_time_s"] is None:
        return True
    stream.steps.append(step)
    stream.count_run = follow(stream.count_run, [step], stream.points, POINTS_KEPT, now_s)  # each alone too
    if step.get("loss") is not None:
        stream.losses.append(step["loss"])
    uuid = stream.gpu_uuid or ""
    ended_s = step.get("t")
    if ended_s is not None and cap_since_wall_s and ended_s < cap_since_wall_s.get(uuid, 0.0):
        return True
    compute_s = step["step_time_s"] - (step.get("comm_s") or 0.0) - (step.get("data_wait_s") or 0.0)
    intake._cap_samples.add(stream.gpu_uuid, caps_w.get(uuid), step.get("samples"), compute_s, step["step_time_s"],
                            stream.last_seen_s)
    return True


def random_message(rng: random.Random, index: int, amp: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"step": index, "step_time_s": rng.choice([0.1, 0.12, 0.3, 0.0, 2e5]),
                               "samples": rng.choice([32, 32, 64, None, 0.5, 2e7]), "t": rng.choice([100.0, 200.0, None]),
                               "comm_s": rng.choice([None, 0.01, 0.2]), "data_wait_s": rng.choice([None, 0.0, 0.05])}
    if rng.random() < 0.3:
        message["loss"] = rng.choice([2.5, 1e31, -1.0])
    if amp and rng.random() < 0.5:
        message["amp_skipped_steps"] = float(index // 7)
    return message


def test_filing_a_read_s_steps_together_is_filing_each_alone(demo_hardware: Hardware, clock: ManualClock) -> None:
    rng = random.Random(99)
    for trial in range(60):
        hubs = [Hub(demo_hardware, host_sampler=FixedHostSampler(), hostname="rig01", clock=clock) for _ in range(2)]
        keys, uuids = [], []
        for hub in hubs:
            hub.tick()
            uuid = hub.snapshot()["gpus"][trial % 4]["uuid"]
            keys.append([hub.agent_hello(parse_hello({"rank": r, "world_size": 2, "job": "j", "pid": 100 + r,
                                                      "gpu_uuid": uuid if r == 0 else None, "nvml_index": r}))
                         for r in range(2)])
            uuids.append(uuid)
        amp = trial % 3 == 0
        index = 0
        for _ in range(rng.randint(1, 12)):
            caps = {uuids[0]: rng.choice([250.0, 350.0, None, 0.5]), "GPU-other": 300.0}
            since = rng.choice([None, {}, {uuids[0]: 150.0}])
            rank = rng.randrange(2)
            messages = [random_message(rng, index + i, amp) for i in range(rng.randint(0, 25))]
            index += len(messages)
            for which, hub in enumerate(hubs):
                hub._caps_w, hub._cap_since_wall_s = dict(caps), (dict(since) if since is not None else since)
                steps = [parse_step(m) for m in messages]
                if which == 0:
                    with hub._lock:
                        for step in steps:
                            old_step(hub._intake, keys[0][rank], step, clock(), hub._caps_w, hub._cap_since_wall_s)
                        for stream in hub._intake.table.streams.values():
                            stream.amp_counted = True  # the old rows always scanned the window
                        hub._ranks_changed = True
                else:
                    hub.agent_steps(keys[1][rank], steps)
            clock.advance(rng.choice([0.1, 1.0, 2000.0]))
        views = [(hub.snapshot()["ranks"], hub.power_points()) for hub in hubs]
        assert views[1] == views[0], (trial, [(i, k, a[k], b.get(k)) for i, (a, b) in enumerate(zip(views[0][0], views[1][0], strict=True)) for k in a if a[k] != b.get(k)])
