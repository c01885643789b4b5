"""Opt-in NCCL transport probe: which rank pairs go through host memory.

Called before the process group is created, it asks NCCL for its INIT log
(NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT, NCCL_DEBUG_FILE) and, once the
communicator exists, parses the per-channel connections:

    Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM        (NCCL 2.28, P2P)
    Channel 00 : 0[0] -> 1[1] via SHM/direct/direct   (NCCL 2.28, P2P disabled)
    ... via P2P/IPC, via SHM/direct, via NET/Socket/0  (other versions)

NCCL creates the communicator lazily: read the log after the first collective.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

CHANNEL_LINE = re.compile(r"Channel\s+\d+(?:/\d+)?\s*:\s*(\d+)\[[^\]]*\]\s*->\s*(\d+)\[[^\]]*\]\s+via\s+(\S+)")


def prepare(folder: str | Path | None = None) -> Path:
    """Set NCCL's logging variables (unless the user set them); return the log file pattern."""
    base = Path(folder) if folder is not None else Path(os.environ.get("TMPDIR", "/tmp"))
    path = base / f"gpumix-nccl.{os.getpid()}.log"
    os.environ.setdefault("NCCL_DEBUG", "INFO")
    os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT")
    os.environ.setdefault("NCCL_DEBUG_FILE", str(path))
    return Path(os.environ["NCCL_DEBUG_FILE"].replace("%p", str(os.getpid())).replace("%h", os.uname().nodename))


def parse_channels(text: str) -> list[dict[str, Any]]:
    """Unique (src, dst, transport) connections named in an NCCL INIT log."""
    seen: dict[tuple[int, int, str], None] = {}
    for match in CHANNEL_LINE.finditer(text):
        src, dst, transport = int(match.group(1)), int(match.group(2)), match.group(3)
        seen[(src, dst, transport)] = None
    return [{"src": s, "dst": d, "transport": t} for s, d, t in seen]


def transport_kind(transport: str) -> str:
    """'P2P/CUMEM' -> 'P2P', 'SHM/direct/direct' -> 'SHM', 'NET/Socket/0' -> 'NET'."""
    return transport.split("/", 1)[0].upper()


def report(agent: Any, log_path: Path) -> list[dict[str, Any]]:
    """Parse the log and send the channels to the hub. Returns them (empty if none yet)."""
    try:
        channels = parse_channels(Path(log_path).read_text(errors="replace"))
    except OSError:
        return []
    if channels:
        agent.sender.put({"type": "transport", "channels": channels[:4096]})
    return channels
