"""Results kept per machine: one JSON file under the state dir, named by a key made of the GPUs'
UUIDs, the driver and each link's class, so a moved card, a new driver or a new slot starts afresh."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

MAX_FILES = 16  # machine states kept; the oldest go first
MAX_FILE_BYTES = 4 * 1024**2
STALE_S = 30 * 24 * 3600.0  # a month: drivers and risers change


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpumix" / "probe"


def machine_key(machine: dict[str, Any]) -> str:
    """What the results are true of: the GPUs (UUID, link class), in order, and the driver."""
    parts = [machine.get("driver_version") or "?"]
    parts += [f"{gpu['uuid']}@{gpu.get('link_max')}" for gpu in machine.get("gpus", [])]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def save(report: dict[str, Any], folder: Path | None = None) -> Path:
    folder = folder or state_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"probe-{machine_key(report['machine'])}.json"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(report, indent=1))
    os.chmod(temporary, 0o600)
    temporary.replace(path)
    kept = sorted(folder.glob("probe-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in kept[MAX_FILES:]:
        old.unlink(missing_ok=True)
    return path


def load(machine: dict[str, Any], folder: Path | None = None, now: float | None = None) -> dict[str, Any] | None:
    """The kept result for this machine state with its age (`age_s`, `stale`), or None: none kept,
    or a file that is not a probe result (one damaged file is no reason to fail)."""
    path = (folder or state_dir()) / f"probe-{machine_key(machine)}.json"
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        report = json.loads(path.read_text())
        measured_at = float(report["measured_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(report, dict) or measured_at != measured_at:
        return None
    age_s = max(0.0, (time.time() if now is None else now) - measured_at)
    return {**report, "age_s": age_s, "stale": age_s > STALE_S}
