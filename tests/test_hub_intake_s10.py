"""A read's steps filed by key, a list each (AgentIntake.steps, session 10, issue 13): parsed steps hold every
field, so the losses, the GradScaler flag and the cap rows are read without a dict.get a field a step; a step
made elsewhere, without some fields, takes the .get reading. Both against the code they replace (kept here)."""

from __future__ import annotations

import random
import sys
from typing import Any

from gpumix.hub.cap_samples import CapSamples
from gpumix.hub.intake import AgentIntake, log
from gpumix.hub.rank_table import RankKey, RankLimits, job_name
from gpumix.hub.ranks import parse_hello, parse_step


def old_steps(intake: AgentIntake, key: RankKey, steps: list[dict[str, Any]], now_s: float,
              caps_w: dict[str, float | None], cap_since_wall_s: dict[str, float] | None = None) -> bool:
    """AgentIntake.steps before session 10."""
    stream = intake.table.for_connection(key)
    if stream is None or not steps:
        return False
    stream.last_seen_s = now_s
    kept = []
    for step in steps:
        rejected = step.pop("rejected", ())
        if rejected:
            if not stream.rejected_values:
                log.warning("hub: rank %d of %s sent %s out of range: dropped (counted in rejected_values)",
                            stream.rank, job_name(stream.job, stream.run_id), ", ".join(rejected))
            stream.rejected_values += len(rejected)
        if step["step_time_s"] is not None:
            kept.append(step)
    stream.steps.extend(kept)
    stream.losses.extend(loss for step in kept if (loss := step.get("loss")) is not None)
    if not stream.amp_counted:
        stream.amp_counted = any(step.get("amp_skipped_steps") is not None for step in kept)
    uuid = stream.gpu_uuid or ""
    since_s = cap_since_wall_s.get(uuid, 0.0) if cap_since_wall_s else 0.0
    rows = [(step.get("samples"), step["step_time_s"] - (step.get("comm_s") or 0.0) - (step.get("data_wait_s") or 0.0),
             step["step_time_s"]) for step in kept if not (step.get("t") is not None and step["t"] < since_s)]
    intake._cap_samples.add_many(stream.gpu_uuid, caps_w.get(uuid), rows, now_s)
    return True


def _intake() -> tuple[AgentIntake, RankKey]:
    intake = AgentIntake([], CapSamples())
    key = intake.hello(parse_hello({"rank": 0, "world_size": 1, "job": "j", "pid": 7, "gpu_uuid": "GPU-a"}), 0.0,
                         RankLimits(ranks=16, per_job=16, gone=16))
    return intake, key  # type: ignore[return-value]


def _message(rng: random.Random, index: int) -> dict[str, Any]:
    message: dict[str, Any] = {"step": index, "step_time_s": rng.choice([0.1, 0.3, 0.0, 2e5])}
    for name, values in (("samples", [32, 64, 2e9]), ("t", [100.0, 200.0]), ("comm_s", [0.01, 0.2]),
                         ("data_wait_s", [0.0, 0.05]), ("loss", [2.5, 1e31]), ("amp_skipped_steps", [1.0, 3.0])):
        if rng.random() < 0.5:
            message[name] = rng.choice(values)
    return message


def _state(intake: AgentIntake) -> Any:
    stream = next(iter(intake.table.streams.values()))
    cap = [(uuid, [(k, list(e.compute_s), list(e.step_s), e.last_seen_s) for k, e in gpu.items()])
           for uuid, gpu in intake._cap_samples._by_gpu.items()]
    return list(stream.steps), list(stream.losses), stream.amp_counted, stream.rejected_values, stream.last_seen_s, cap


def test_filing_by_key_is_the_get_reading_on_parsed_and_partial_steps() -> None:
    rng = random.Random(5)
    for trial in range(80):
        (new, new_key), (old, old_key) = _intake(), _intake()
        for write in range(rng.randrange(1, 8)):
            messages = [_message(rng, write * 100 + i) for i in range(rng.randrange(0, 12))]
            if trial % 2:  # parsed: every field there
                steps = [[parse_step(m) for m in messages] for _ in range(2)]
            else:  # made elsewhere: only the fields given, a step time always
                steps = [[dict(m, rejected=[]) for m in messages] for _ in range(2)]
            caps = {"GPU-a": rng.choice([250.0, None])}
            since = rng.choice([None, {}, {"GPU-a": 150.0}])
            assert new.steps(new_key, steps[0], float(write), caps, since) == old_steps(
                old, old_key, steps[1], float(write), caps, since)
            assert _state(new) == _state(old)


def test_a_parsed_write_is_filed_without_a_lookup_a_field_a_step() -> None:
    intake, key = _intake()
    steps = [parse_step({"step": i, "step_time_s": 0.1, "samples": 32, "comm_s": 0.01, "loss": 1.0, "t": 5.0})
             for i in range(10)]
    gets: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and getattr(arg, "__name__", "") == "get" and "intake.py" in frame.f_code.co_filename:
            gets.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        intake.steps(key, steps, 1.0, {"GPU-a": 250.0}, {"GPU-a": 0.0})
    finally:
        sys.setprofile(None)
    assert len(gets) <= 2  # the cap and when it was first seen, once a write
    stream = next(iter(intake.table.streams.values()))
    assert len(stream.steps) == 10 and list(stream.losses) == [1.0] * 10
