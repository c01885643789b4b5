"""A recording hub in its own process, ticked on command, for the crash test:
`python tests/record_commit_helper.py FILE`.

Prints `ready`, then for each line `tick` on stdin samples the simulated mixed-10 rig once and
prints that snapshot's timestamp. Nobody flushes: the recorder commits on its own interval, and the
test waits for each tick to show up committed before it SIGKILLs this process.
"""

from __future__ import annotations

import sys

from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.record.recorder import Recorder
from gpumix.sim.rig import load_builtin_rig


def main() -> None:
    hub = Hub(simulated_hardware(load_builtin_rig("mixed-10")))
    Recorder(sys.argv[1]).attach(hub)
    print("ready", flush=True)
    for line in sys.stdin:  # until the test kills it
        if line.strip() == "tick":
            print(repr(hub.tick()["timestamp_s"]), flush=True)


if __name__ == "__main__":
    main()
