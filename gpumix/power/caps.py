"""Power caps: set, reset, within each card's allowed range, with an audit log.

Every refusal is one clear sentence and changes nothing: a cap outside the
card's range is refused before NVML is called; NVML's NoPermission and
NotSupported are explained. Real GPUs are only touched by an explicit user
action (never by tests or benchmarks: those use the simulator).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pynvml

from gpumix.hw.nvml_backend import NvmlBackend
from gpumix.hw.types import GpuInfo

PRIVILEGE_HINT = (
    "setting power caps needs root (or CAP_SYS_ADMIN): run the hub as root with a socket your group may use,"
    " e.g. `sudo gpumix hub --socket /run/gpumix/hub.sock --allow-group gpumix`, then as yourself"
    " `gpumix-top --hub /run/gpumix/hub.sock` (docs/power.md)"
)
MAX_CLAIMED_USER = 64  # characters of a user name a client claims (kept apart, never trusted)


class PowerError(RuntimeError):
    """A refused power change; str() is the one line shown to the user."""


@dataclass(frozen=True)
class AuditUser:
    """Who the audit names: the peer the hub's server knows (uid, token holder) or this process's
    user; what a client said about itself is kept apart as `claimed`."""

    name: str
    claimed: str | None = None


@dataclass(frozen=True)
class PowerChange:
    time_s: float
    user: str
    gpu_index: int
    gpu_uuid: str
    old_w: float | None
    new_w: float
    dry_run: bool
    claimed_user: str | None = field(default=None, repr=False)  # audit only
    audit_error: str | None = field(default=None, repr=False)  # why the audit line could not be written

    def to_json(self) -> dict[str, object]:
        line = asdict(self)
        del line["claimed_user"], line["audit_error"]
        return line

    def audit_json(self) -> dict[str, object]:
        line = self.to_json()
        if self.claimed_user is not None:
            line["claimed_user"] = self.claimed_user
        return line


def audit_log_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpumix" / "power-audit.jsonl"


def check_cap(info: GpuInfo, watts: float) -> None:
    """Refuse, before NVML is called, a cap the card cannot take."""
    if info.power_limit_min_w is None or info.power_limit_max_w is None:
        raise PowerError(f"GPU {info.index} ({info.model}) does not report its power-limit range: caps cannot be set")
    if not info.power_limit_min_w <= watts <= info.power_limit_max_w:
        raise PowerError(
            f"GPU {info.index} ({info.model}) takes {info.power_limit_min_w:.0f}–{info.power_limit_max_w:.0f} W;"
            f" {watts:g} W is outside that range"
        )


class PowerController:
    def __init__(self, backend: NvmlBackend, audit_path: Path | None = None, user: str | None = None) -> None:
        self.backend = backend
        self.audit_path = audit_path if audit_path is not None else audit_log_path()
        self._user = user

    @property
    def user(self) -> str:
        """Who the audit names by default: looked up when a cap first changes (getpass loads then)."""
        if self._user is None:
            self._user = _user()
        return self._user

    def info(self, index: int) -> GpuInfo:
        infos = self.backend.gpus()
        if not 0 <= index < len(infos):
            raise PowerError(f"no GPU {index} (this machine has {len(infos)}: 0–{len(infos) - 1})")
        return infos[index]

    def set_cap(self, index: int, watts: float, dry_run: bool = False, user: str | AuditUser | None = None) -> PowerChange:
        """Apply (or with dry_run only check) a cap; an applied one gets an audit line, and a line
        that could not be written is said in the change's `audit_error` (the cap stays applied)."""
        info = self.info(index)
        check_cap(info, watts)
        who = user if isinstance(user, AuditUser) else AuditUser(user or self.user)
        claimed = who.claimed[:MAX_CLAIMED_USER] if who.claimed is not None else None
        change = PowerChange(time.time(), who.name, index, info.uuid, self.backend.power_limit_w(index), float(watts),
                             dry_run, claimed_user=claimed)
        if dry_run:
            return change
        try:
            self.backend.set_power_limit_w(index, watts)
        except pynvml.NVMLError_NoPermission:
            raise PowerError(f"GPU {index}: permission denied: {PRIVILEGE_HINT}") from None
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            raise PowerError(f"GPU {index} ({info.model}): this card does not allow its power limit to be set") from None
        except pynvml.NVMLError_GpuIsLost:
            raise PowerError(f"GPU {index} is lost (fell off the bus): nothing was changed") from None
        except pynvml.NVMLError as error:
            raise PowerError(f"GPU {index}: NVML refused the cap: {error}") from None
        error = self._audit(change)
        return change if error is None else replace(change, audit_error=error)

    def reset_cap(self, index: int, dry_run: bool = False, user: str | AuditUser | None = None) -> PowerChange:
        info = self.info(index)
        if info.power_limit_default_w is None:
            raise PowerError(f"GPU {index} ({info.model}) does not report its default power limit")
        return self.set_cap(index, info.power_limit_default_w, dry_run=dry_run, user=user)

    def _audit(self, change: PowerChange) -> str | None:
        """One JSON line per applied change: time, user, GPU UUID, old and new cap; the reason it could
        not be written, or None. The cap is applied either way: an unwritable log must not undo it."""
        try:
            self.audit_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.audit_path, "a") as log:
                log.write(json.dumps(change.audit_json()) + "\n")
        except OSError as error:
            return f"{self.audit_path}: {error.strerror or error}"
        return None


def _user() -> str:
    import getpass  # here: a dashboard whose caps never change never loads it

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
