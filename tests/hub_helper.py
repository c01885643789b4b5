"""A hub in its own process, for fault tests: `python tests/hub_helper.py SOCKET_PATH`.

Serves the simulated mixed-10 rig on SOCKET_PATH, prints `ready` once it
listens, and stops cleanly on SIGTERM/SIGINT. Tests kill it (SIGKILL),
freeze it (SIGSTOP/SIGCONT) and read its ranks through a HubClient.
"""

from __future__ import annotations

import signal
import sys
import threading

from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.hub.server import HubServer
from gpumix.sim.rig import load_builtin_rig


def main() -> None:
    hub = Hub(simulated_hardware(load_builtin_rig("mixed-10")), interval_s=0.5)
    hub.tick()  # a snapshot from the first request on
    hub.start()
    server = HubServer(hub, sys.argv[1])
    server.start()
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    print("ready", flush=True)
    while not done.wait(0.1):
        pass
    server.stop()
    hub.stop()


if __name__ == "__main__":
    main()
