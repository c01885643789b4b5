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
