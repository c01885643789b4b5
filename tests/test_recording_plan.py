"""A recording's `plan` events: one per change of the plan in force, none per tick and none for a job
still starting up (issue 12, item 14)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from gpumix.hub import Hub
from gpumix.record.recorder import Recorder


def plan(plan_id: str | None, samples: list[int], applied_s: float | None = 1.0) -> dict[str, Any]:
    return {"job": "train", "plan_id": plan_id, "supervised": plan_id is not None, "global_batch": sum(samples) or None,
            "ranks": [{"rank": r, "samples": n, "micro_batch": n, "accumulation_steps": 1} for r, n in enumerate(samples)],
            "restarts": 0, "applied_at_step": 0, "applied_s": applied_s, "predicted_speedup": None}


def test_plan_events_fire_once_per_change(demo_hub: Hub, tmp_path: Path) -> None:
    path = tmp_path / "rec.sqlite"
    recorder = Recorder(path)
    base = demo_hub.snapshot()
    assert base is not None
    starting, first, second = plan("initial", [], applied_s=None), plan("initial", [48, 48]), plan("p2", [64, 32], 9.0)
    for t, shown in enumerate([None, starting, starting, first, first, first, starting, first, second, second]):
        recorder.on_snapshot({**base, "timestamp_s": base["timestamp_s"] + t, "plan": shown})
    assert recorder.flush()
    rows = sqlite3.connect(path).execute("SELECT payload FROM events WHERE kind = 'plan' ORDER BY t").fetchall()
    assert [json.loads(payload)["plan"] for (payload,) in rows] == [first, second]
    recorder.close()
