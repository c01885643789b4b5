"""Results kept per machine: one JSON file under the state dir, named by a key made of the GPUs'
UUIDs, the driver and each link's class, so a moved card, a new driver or a new slot starts afresh."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import stat
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
    import hashlib  # here, not at import: hashlib maps OpenSSL into every dashboard (the advisor imports this module)

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


# -- reading kept results for the advisor (the hub asks on every snapshot: cached, bounded) ----------

log = logging.getLogger(__name__)
_SAFE_TEXT = re.compile(r"[0-9A-Za-z.?_/-]{1,64}")  # a driver version, link label or transport read back
_cache: dict[Path, tuple[tuple[int, int], dict[str, Any] | None]] = {}  # path -> (mtime_ns, size), result
_listing: dict[Path, tuple[tuple[int, int], list[Path]]] = {}  # folder -> (inode, mtime_ns), its probe files
LISTING_SETTLED_S = 2.0  # an mtime older than this is past any filesystem's timestamp granularity


def kept_for(uuids: list[str], folder: Path | None = None, now: float | None = None) -> list[dict[str, Any]]:
    """The kept results that probed any of these GPUs (by UUID), newest first, each with `age_s` and
    `path`. Reads at most MAX_FILES files of at most MAX_FILE_BYTES, each parsed again only when it
    changes; a file that is not a plain, well-formed probe result is ignored with one log line."""
    folder = folder or state_dir()
    wanted = set(uuids)
    try:
        paths = _probe_paths(folder)
        stamped = []
        for path in paths:
            info = path.stat()
            if stat.S_ISREG(info.st_mode):  # never open a FIFO or device someone named probe-x.json
                stamped.append((info.st_mtime_ns, info.st_size, path))
    except OSError:
        return []
    stamped.sort(reverse=True)
    stamped = stamped[:MAX_FILES]
    if len(_cache) > 4 * MAX_FILES:  # other folders (tests, a changed XDG_STATE_HOME) come and go
        _cache.clear()
    for gone in set(_cache) - {path for _, _, path in stamped}:
        if gone.parent == folder:
            del _cache[gone]
    found = []
    for mtime_ns, size, path in stamped:
        cached = _cache.get(path)
        if cached is None or cached[0] != (mtime_ns, size):
            cached = ((mtime_ns, size), _read_checked(path, size))
            _cache[path] = cached
        report = cached[1]
        if report is not None and wanted & {gpu["uuid"] for gpu in report["machine"]["gpus"]}:
            age_s = max(0.0, (time.time() if now is None else now) - report["measured_at"])
            found.append({**report, "age_s": age_s, "path": str(path)})
    return sorted(found, key=lambda report: report["age_s"])


def _probe_paths(folder: Path) -> list[Path]:
    """The folder's probe-*.json paths (at most 4 * MAX_FILES), listed again only when the folder changes:
    saving, replacing or removing a file in it moves its mtime. A file rewritten in place does not, but
    kept_for stats each listed file anyway. Raises OSError where the folder cannot be read."""
    info = folder.stat()
    key = (info.st_ino, info.st_mtime_ns)
    cached = _listing.get(folder)
    if cached is not None and cached[0] == key:
        return cached[1]
    paths = list(folder.glob("probe-*.json"))[: 4 * MAX_FILES]
    # A filesystem stamps mtimes from a coarse clock: a second change within the same few ms after this
    # listing would leave the mtime as it was. Trust only an mtime that has had time to settle.
    if time.time() - info.st_mtime_ns / 1e9 > LISTING_SETTLED_S:
        if len(_listing) > 4 * MAX_FILES:
            _listing.clear()
        _listing[folder] = (key, paths)
    return paths


def _read_checked(path: Path, size: int) -> dict[str, Any] | None:
    """A kept file, or None with one log line saying why it is ignored."""
    try:
        if size > MAX_FILE_BYTES:
            raise ValueError(f"over {MAX_FILE_BYTES // 1024**2} MiB")
        with path.open("rb") as handle:
            report = json.loads(handle.read(MAX_FILE_BYTES + 1))
        return checked(report)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as error:
        log.warning("ignoring kept probe result %s: %s", path.name, str(error)[:120])
        return None


def checked(report: Any) -> dict[str, Any]:
    """The parts of a kept result the advisor reads, each of the expected type, text reduced to safe
    labels and numbers finite; raises ValueError naming the first thing wrong."""
    if not isinstance(report, dict) or not isinstance(report.get("machine"), dict):
        raise ValueError("not a probe result")
    measured_at = report.get("measured_at")
    if not isinstance(measured_at, int | float) or not math.isfinite(measured_at):
        raise ValueError("no finite measured_at")
    machine = report["machine"]
    gpus = machine.get("gpus")
    if not isinstance(gpus, list) or not gpus or len(gpus) > 1024:
        raise ValueError("no GPUs in machine")
    kept_gpus = []
    for gpu in gpus:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("uuid"), str) or not 0 < len(gpu["uuid"]) <= 128:
            raise ValueError("a GPU without a UUID")
        kept_gpus.append({"uuid": gpu["uuid"], "nvml_index": _index(gpu.get("nvml_index")),
                          "pcie_gen_max": _index(gpu.get("pcie_gen_max")),
                          "pcie_width_max": _index(gpu.get("pcie_width_max"))})
    return {"measured_at": float(measured_at),
            "machine": {"driver_version": safe_text(machine.get("driver_version")), "gpus": kept_gpus},
            "gpus": [g for g in _dicts(report.get("gpus")) if _index(g.get("gpu")) is not None],
            "together": report["together"] if isinstance(report.get("together"), dict) else None,
            "pairs": _dicts(report.get("pairs")),
            "allreduce": report["allreduce"] if isinstance(report.get("allreduce"), dict) else None}


def safe_text(value: Any) -> str | None:
    """A label from a file (driver version, '4x16'), or None: never markup or escapes."""
    return value if isinstance(value, str) and _SAFE_TEXT.fullmatch(value) else None


def _index(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 4096 else None


def _dicts(value: Any, limit: int = 1024) -> list[dict[str, Any]]:
    return [item for item in value[:limit] if isinstance(item, dict)] if isinstance(value, list) else []
