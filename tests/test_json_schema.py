"""The snapshot contract: docs/json.md is what scripts/json_schema.py generates from
gpumix/wire/snapshot_types.py, and a real `gpumix-top --demo --once --json` validates against it."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("json_schema", ROOT / "scripts" / "json_schema.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


json_schema = _script()


@pytest.fixture(scope="module")
def demo_snapshot() -> dict:
    done = subprocess.run([str(Path(sys.executable).parent / "gpumix-top"), "--demo", "--once", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_published_schema_is_generated():
    assert (ROOT / "docs" / "json.md").read_text() == json_schema.render_doc(), \
        "docs/json.md is stale: run python scripts/json_schema.py --write"


def test_demo_once_json_validates(demo_snapshot):
    schema = json_schema.snapshot_schema()
    assert json_schema.validate(demo_snapshot, schema) == []
    assert demo_snapshot["schema_version"] == 1
    assert json_schema.undeclared(demo_snapshot, schema) == [], "declare them in gpumix/wire/snapshot_types.py"
    # the demo fills what the schema describes, so the check above looked at every level
    assert demo_snapshot["gpus"][0]["processes"] and demo_snapshot["ranks"] and demo_snapshot["findings"]


@pytest.mark.parametrize("damage, found", [
    (lambda s: s.pop("gpus"), "$: 'gpus' is missing"),
    (lambda s: s["gpus"][0].update(power_w="170"), "$.gpus[0].power_w"),
    (lambda s: s["ranks"][0].update(connected=1), "$.ranks[0].connected"),
    (lambda s: s["findings"][0].update(severity="fatal"), "$.findings[0].severity"),
    (lambda s: s["gpus"][0]["processes"][0].update(pid=1.5), "$.gpus[0].processes[0].pid"),
    (lambda s: s["runs"].update(other=[]), "$.runs.other"),
])
def test_schema_refuses_a_damaged_snapshot(demo_snapshot, damage, found):
    snapshot = copy.deepcopy(demo_snapshot)
    damage(snapshot)
    errors = json_schema.validate(snapshot, json_schema.snapshot_schema())
    assert any(error.startswith(found) for error in errors), errors


def test_the_step_message_is_declared_once() -> None:
    """The agent sends, and the hub checks, exactly the fields gpumix.wire.snapshot_types declares."""
    from gpumix.agent.core import RECORD_NUMBERS
    from gpumix.hub.ranks import STEP_RANGES, parse_step
    from gpumix.wire.snapshot_types import (
        AMP_DTYPES,
        STEP_NUMBER_RANGES,
        STEP_TIME_RANGE_S,
        StepMessage,
    )

    declared = set(StepMessage.__annotations__)
    assert STEP_RANGES is STEP_NUMBER_RANGES
    assert declared == {"type", "step", "step_time_s", "amp_dtype"} | set(STEP_NUMBER_RANGES)
    assert set(RECORD_NUMBERS) <= declared
    # every declared number at the top of its range passes the hub's check, kept as sent
    message = {"type": "step", "step": 3, "step_time_s": STEP_TIME_RANGE_S[1], "amp_dtype": AMP_DTYPES[0],
               **{name: high for name, (_, high) in STEP_NUMBER_RANGES.items()}}
    step = parse_step(message)
    assert step["rejected"] == []
    assert {name: step[name] for name in STEP_NUMBER_RANGES} == {n: h for n, (_, h) in STEP_NUMBER_RANGES.items()}


def test_an_agent_sends_only_declared_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumix.agent.core import Agent
    from gpumix.wire.snapshot_types import StepMessage

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    agent = Agent("/nonexistent/gpumix-hub.sock", job="contract", max_messages=64)
    try:
        agent.micro_batch, agent.accumulation_steps, agent.gradient_bytes = 8, 2, 1024
        for index in range(3):
            with agent.step(samples=8, tokens=64) as step:
                step.loss, step.lr = 2.0 - index, 1e-3
        steps = [m for m in agent._collect() if m.get("type") == "step"]  # no hub: only the test collects
    finally:
        agent.close(0.1)
    assert len(steps) == 2  # the last step waits for the next one (or close)
    assert {"loss", "lr", "samples", "tokens", "micro_batch", "gradient_bytes"} <= set(steps[0])
    assert all(set(m) <= set(StepMessage.__annotations__) for m in steps), steps


def test_keys_a_snapshot_may_lack_are_optional_and_the_others_required() -> None:
    # snapshot_types is written under `from __future__ import annotations`: Python 3.11's
    # __required_keys__ then counts NotRequired keys as required (the schema refused a hub's
    # snapshot without power_points, which it has only once a cap has changed)
    schema = json_schema.snapshot_schema()
    assert "power_points" in schema["properties"] and "power_points" not in schema["required"]
    assert {"gpus", "host", "ranks", "findings", "plan"} <= set(schema["required"])
