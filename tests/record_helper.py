"""A hub that records, in its own process, for the crash test: `python tests/record_helper.py FILE`.

Samples the simulated mixed-10 rig every 0.2 s into FILE and prints `ready` once
the first snapshot is committed. The test SIGKILLs it.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
from pathlib import Path

from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.record.recorder import Recorder
from gpumix.sim.rig import load_builtin_rig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: tests/ importable
from tests.waiting import wait_until  # noqa: E402


def main() -> None:
    hub = Hub(simulated_hardware(load_builtin_rig("mixed-10")), interval_s=0.2)
    Recorder(sys.argv[1]).attach(hub)
    hub.start()
    reader = sqlite3.connect(sys.argv[1])
    wait_until(lambda: reader.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0], 60, "the first snapshot")
    print("ready", flush=True)
    while True:  # until the test kills it
        signal.pause()


if __name__ == "__main__":
    main()
