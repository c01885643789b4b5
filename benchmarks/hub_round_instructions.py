"""Instructions per hub round under valgrind (issue 13): a count that a loaded box does not move.

One process runs hub_tick_parts.py's round (R ranks' agent writes read, one Hub.tick, one client reply
encoded) 20 times to warm, then N times; callgrind counts the whole process's instructions. Two runs with
different N differ only by the rounds: (Ir(N2) - Ir(N1)) / (N2 - N1) is the instructions of one round.
PYTHONHASHSEED=0 keeps the runs alike; the simulated rig's noise is seeded.

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/hub_round_instructions.py --ranks 10 --rounds 25
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import hub_tick_parts  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args(argv)
    _, one_round = hub_tick_parts.make_round(args.ranks)
    for _ in range(20 + args.rounds):
        one_round()
    return 0


if __name__ == "__main__":
    sys.exit(main())
