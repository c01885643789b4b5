"""A running node for this machine, as the commands start one: the hub, its socket server, and the demo job.

`gpumix-top` embeds one when no hub runs; `gpumix hub` runs one headless.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpumix.hub.core import Hub
from gpumix.hub.server import HubServer
from gpumix.hw.hardware import Hardware
from gpumix.wire.auth import UnixAccess
from gpumix.wire.paths import runtime_dir

if TYPE_CHECKING:  # a type only: ssl loads where TLS is used (~5 MB of RSS)
    import ssl


@dataclass
class Node:
    hub: Hub
    server: HubServer | None = None
    demo: object | None = None  # a DemoJob while the demo runs

    def stop(self) -> None:
        if self.demo is not None:
            self.demo.stop()
        if self.server is not None:
            self.server.stop()
        self.hub.stop()
        if self.demo is not None:  # the demo's files are its own: none is left behind
            shutil.rmtree(self.demo.supervisor.folder, ignore_errors=True)
            if self.server is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.server.socket_path)

    def wait_for_ranks(self, count: int, timeout_s: float) -> bool:
        """Until `count` ranks have reported a step (for --once with the demo)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            snapshot = self.hub.snapshot()
            if snapshot and sum(1 for r in snapshot["ranks"] if r["step"] is not None) >= count:
                return True
            time.sleep(0.05)
        return False


def demo_socket_path() -> str:
    """The demo gets a socket of its own: it never takes the place of a real hub."""
    return str(runtime_dir() / f"demo-{os.getpid()}.sock")


# What a demo leaves in the runtime dir while it runs: its socket and its supervisor's folder.
DEMO_LEFTOVER = re.compile(r"demo-(\d+)\.sock|run-demo-(\d+)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process, or no pid at all
        return pid < 2**22
    return True


def sweep_demo_leftovers(folder: Path) -> list[str]:
    """Remove what demos that ended without cleaning up (killed, the terminal closed) left in
    `folder`: sockets and folders named after a process that no longer runs. Returns their names."""
    removed = []
    for entry in folder.iterdir():
        match = DEMO_LEFTOVER.fullmatch(entry.name)
        if match is None or _alive(int(match.group(1) or match.group(2))):
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry.name)
    return removed


def start_node(hardware: Hardware, socket_path: str, interval_s: float = 1.0, history_s: float = 600.0,
               demo: bool = False, sample_in_thread: bool = True, tcp: tuple[str, int] | None = None,
               token: str | None = None, tls: ssl.SSLContext | None = None,
               access: UnixAccess | None = None, rank_retention_s: float = 600.0,
               scenario: str | None = None) -> Node:
    """Start hub, server and (with demo) the demo job. Raises HubAlreadyRunning or OSError.
    `access`: who besides the owner may use the Unix socket (gpumix hub --allow-group/--allow-uid)."""
    hub = Hub(hardware, interval_s=interval_s, history_s=history_s, rank_retention_s=rank_retention_s)
    server = HubServer(hub, socket_path, tcp=tcp, token=token, tls=tls, access=access)
    server.start()
    node = Node(hub=hub, server=server)
    try:
        if scenario is not None:  # one field finding on purpose, instead of the demo job (ScenarioError)
            from gpumix.demo.scenarios import start_scenario

            hub.tick()
            start_scenario(hub, scenario)
        elif demo and hardware.machine is not None:
            from gpumix.demo.job import DemoJob

            sweep_demo_leftovers(runtime_dir())

            job = DemoJob(hub, hardware.machine, socket_path, rig_source=hardware.rig_source or "mixed-10")
            job.start()
            node.demo = job
        if sample_in_thread:
            hub.start()
    except BaseException:
        node.stop()
        raise
    return node
