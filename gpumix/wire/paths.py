"""Where the hub listens: a Unix socket in the user's runtime directory, owner-only."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

from gpumix.wire.unix_connect import connect_unix

HUB_ENV = "GPUMIX_HUB"  # a socket path, or tcp://HOST:PORT


def runtime_dir() -> Path:
    """$XDG_RUNTIME_DIR/gpumix (per user, on tmpfs), else /tmp/gpumix-UID; created 0700."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(base) / "gpumix" if base else Path(tempfile.gettempdir()) / f"gpumix-{os.getuid()}"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_uid != os.getuid():
        raise PermissionError(f"{folder} belongs to another user")
    os.chmod(folder, 0o700)
    return folder


def default_hub_address() -> str:
    return os.environ.get(HUB_ENV) or str(runtime_dir() / "hub.sock")


def hub_answers(path: str, timeout_s: float = 0.5) -> bool:
    """A hub listens on this Unix socket. Here, not with the hub's connections: a one-shot asks without
    loading asyncio and the hub (about 47 modules)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout_s)
    try:
        connect_unix(probe, path, timeout_s)  # a full backlog is a busy hub, not an absent one
        return True
    except OSError:
        return False
    finally:
        probe.close()
