"""Wall time of the one-shots attached to a running hub, two checkouts alternated (issue 13): each
round runs every command once per checkout, in turn; medians over rounds. Python's own floor runs in
the same rounds (`python -c pass`, `python -c "import json, socket"`), so a figure reads against what
the interpreter itself costs on the machine at that moment.

    python benchmarks/oneshot_attached_ab.py --hub SOCKET --before DIR --after DIR [--tree LABEL=DIR ...] \
        --rounds 5 --out FILE.json

DIR holds a `gpumix` package with gpumix/tui, gpumix/agent and gpumix/themes in it (e.g.
`git archive REV gpumix tui agent themes | tar -x -C DIR`, then move tui, agent and themes into
DIR/gpumix); it goes first on PYTHONPATH. Each command starts as the installed `gpumix` and
`gpumix-top` scripts do (import main, call it). Bytecode is compiled once per tree into a cache of its
own (PYTHONPYCACHEPREFIX, even where PYTHONDONTWRITEBYTECODE is set) and one unmeasured round warms it:
an installed package has its .pyc files, so compiling is not part of a one-shot's cost."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ENTRY = "import sys; from {module} import main; sys.exit(main())"
COMMANDS = {"gpumix doctor": ["-c", ENTRY.format(module="gpumix.cli.main"), "doctor"],
            "gpumix power show": ["-c", ENTRY.format(module="gpumix.cli.main"), "power", "show"],
            "gpumix-top --once --json": ["-c", ENTRY.format(module="gpumix.tui.main"), "--once", "--json"]}
FLOOR = {"python -c pass": ["-c", "pass"], "python -c 'import json, socket'": ["-c", "import json, socket"]}
COUNT_MODULES = "import atexit, sys; atexit.register(lambda: print('modules', len(sys.modules), file=sys.stderr)); "


def tree_env(tree: str, hub: str) -> dict[str, str]:
    """The tree before what PYTHONPATH holds already (wheels of psutil and pynvml where they are not installed)."""
    path = os.pathsep.join(filter(None, [tree, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "GPUMIX_HUB": hub, "PYTHONPYCACHEPREFIX": os.path.join(tree, ".pycache")}


def modules_loaded(args: list[str], tree: str, hub: str) -> int:
    """How many modules the command has loaded when it exits (sys.modules, Python's own included)."""
    env = tree_env(tree, hub)
    code = [args[0], COUNT_MODULES + args[1], *args[2:]]
    result = subprocess.run([sys.executable, *code], env=env, capture_output=True, text=True, cwd="/")
    return int(result.stderr.strip().splitlines()[-1].split()[1])


def wall_s(args: list[str], tree: str, hub: str, attaches: bool) -> float:
    env = tree_env(tree, hub)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, *args], env=env, capture_output=True, cwd="/")
    elapsed_s = time.perf_counter() - start
    if attaches and b"using the running hub" not in result.stderr:  # a run that did not attach measures something else
        raise SystemExit(f"{args}: did not attach: {result.stderr[-300:]!r}")
    return elapsed_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hub", required=True)
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR", help="a third tree (repeatable)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", required=True)
    parser.add_argument("--note", default="", help="what the two trees are, how the hub runs, the machine")
    args = parser.parse_args()
    trees = {"before": args.before, "after": args.after}
    for given in args.tree:
        label, _, tree = given.partition("=")
        if not label or not tree or label in trees:
            parser.error(f"--tree {given!r}: LABEL=DIR with a label of its own")
        trees[label] = tree
    runs = {name: (command, True) for name, command in COMMANDS.items()}
    runs.update({name: (command, False) for name, command in FLOOR.items()})
    for command, attaches in runs.values():  # the warm-up: bytecode compiled and cached, not measured
        for tree in trees.values():
            wall_s(command, tree, args.hub, attaches)
    modules = {name: {label: modules_loaded(command, tree, args.hub) for label, tree in trees.items()}
               for name, (command, _) in runs.items()}
    loadavg_before = os.getloadavg()
    times_s: dict[str, dict[str, list[float]]] = {name: {label: [] for label in trees} for name in runs}
    for _ in range(args.rounds):
        for name, (command, attaches) in runs.items():
            for label, tree in trees.items():
                times_s[name][label].append(round(wall_s(command, tree, args.hub, attaches), 4))
    result = {"command": " ".join(sys.argv), "note": args.note, "rounds": args.rounds, "cpu_count": os.cpu_count(),
              "loadavg_before": loadavg_before, "loadavg_after": os.getloadavg(),
              "median_s": {name: {label: round(statistics.median(v), 4) for label, v in by_tree.items()}
                           for name, by_tree in times_s.items()},
              "modules_loaded": modules, "all_s": times_s}
    with open(args.out, "w") as out:
        json.dump(result, out, indent=1)
    print(json.dumps(result["median_s"]))


if __name__ == "__main__":
    main()
