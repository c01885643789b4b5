"""Instructions per hub round under valgrind (issue 13): a count that a loaded box does not move.

One process runs hub_tick_parts.py's round (R ranks' agent writes read, one Hub.tick, one client reply
encoded) 20 times to warm, then N times; callgrind counts the whole process's instructions. Two runs with
different N differ only by the rounds: (Ir(N2) - Ir(N1)) / (N2 - N1) is the instructions of one round.
PYTHONHASHSEED=0 keeps the runs alike; the simulated rig's noise is seeded.

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/hub_round_instructions.py --ranks 10 --rounds 25

Session 10: `--no-client` leaves the client reply out (the device's measure has none); `--world-only` runs
only the simulated world's part of a no-client round (the machine's step, then the NVML calls the backend
made in that round of a 5-round cycle, replayed on the simulated NVML in order): a round's instructions less
its world's are the hub's own, as issue 13 counts them. The world runs on a clock one second a round.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import hub_tick_parts  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--no-client", action="store_true", help="no client reply encoded in a round")
    parser.add_argument("--world-only", action="store_true", help="only the simulated world's part of a round")
    args = parser.parse_args(argv)
    hub, one_round = hub_tick_parts.make_round(args.ranks, client=not (args.no_client or args.world_only))
    if args.world_only:
        one_round = world_round(hub, one_round)
    for _ in range(20 + args.rounds):
        one_round()
    return 0


WORLD_CYCLE = 5  # rounds: the backend's slow readings come every 5 s


def world_round(hub: Any, hub_round: Callable[[], None]) -> Callable[[], None]:
    """A round of the world alone: the machine's step and the round's NVML calls (recorded over WORLD_CYCLE
    hub rounds, from every thread: the PCIe window runs on a pool) replayed on the simulated NVML."""
    backend, machine = hub.hardware.backend, hub.hardware.machine
    nvml = backend._nvml
    for _ in range(20):
        hub_round()
    recorded: list[list[tuple[str, tuple[Any, ...]]]] = []

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            function = getattr(nvml, name)

            def record(*args: Any) -> Any:
                recorded[-1].append((name, args))
                return function(*args)
            return record

    backend._nvml = Recorder()
    try:
        for _ in range(WORLD_CYCLE):
            recorded.append([])
            hub_round()
    finally:
        backend._nvml = nvml
    clock = machine.clock.args[0]  # hub_tick_parts.RoundClock behind its reader
    turn = itertools.cycle(recorded)

    def one_round() -> None:
        clock.now_s += 1.0
        machine.tick()
        for name, args in next(turn):
            getattr(nvml, name)(*args)

    return one_round


if __name__ == "__main__":
    sys.exit(main())
