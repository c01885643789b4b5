"""Wall time of `gpumix doctor` and `gpumix power show` attached to a running hub, two checkouts
alternated (issue 13): each round runs every command once per checkout, in turn; medians over rounds.

    python benchmarks/oneshot_attached_ab.py --hub SOCKET --before DIR --after DIR --rounds 5 --out FILE.json

DIR holds a `gpumix` package (e.g. `git archive REV gpumix | tar -x -C DIR`); it goes first on PYTHONPATH."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {"gpumix doctor": ["-m", "gpumix.cli.main", "doctor"],
            "gpumix power show": ["-m", "gpumix.cli.main", "power", "show"],
            "gpumix-top --once --json": ["-m", "gpumix.tui.main", "--once", "--json"]}


def wall_s(args: list[str], tree: str, hub: str) -> float:
    env = {**os.environ, "PYTHONPATH": tree, "GPUMIX_HUB": hub}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, *args], env=env, capture_output=True, cwd="/")
    elapsed_s = time.perf_counter() - start
    if b"using the running hub" not in result.stderr:  # a run that did not attach measures something else
        raise SystemExit(f"{args}: did not attach: {result.stderr[-300:]!r}")
    return elapsed_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hub", required=True)
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", required=True)
    parser.add_argument("--note", default="", help="what the two trees are, how the hub runs, the machine")
    args = parser.parse_args()
    trees = {"before": args.before, "after": args.after}
    times_s: dict[str, dict[str, list[float]]] = {name: {label: [] for label in trees} for name in COMMANDS}
    for _ in range(args.rounds):
        for name, command in COMMANDS.items():
            for label, tree in trees.items():
                times_s[name][label].append(round(wall_s(command, tree, args.hub), 4))
    result = {"command": " ".join(sys.argv), "note": args.note, "rounds": args.rounds, "cpu_count": os.cpu_count(),
              "loadavg_after": os.getloadavg(),
              "median_s": {name: {label: round(statistics.median(v), 4) for label, v in runs.items()}
                           for name, runs in times_s.items()},
              "all_s": times_s}
    with open(args.out, "w") as out:
        json.dump(result, out, indent=1)
    print(json.dumps(result["median_s"]))


if __name__ == "__main__":
    main()
