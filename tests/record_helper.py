"""A hub that records, in its own process, for the crash test: `python tests/record_helper.py FILE`.

Samples the simulated mixed-10 rig every 0.2 s into FILE and prints `ready` once
the first snapshot is committed. The test SIGKILLs it.
"""

from __future__ import annotations

import sqlite3
import sys
import time

from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.record.recorder import Recorder
from gpumix.sim.rig import load_builtin_rig


def main() -> None:
    hub = Hub(simulated_hardware(load_builtin_rig("mixed-10")), interval_s=0.2)
    Recorder(sys.argv[1]).attach(hub)
    hub.start()
    reader = sqlite3.connect(sys.argv[1])
    while not reader.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0]:
        time.sleep(0.05)
    print("ready", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
