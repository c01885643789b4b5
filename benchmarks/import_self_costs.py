"""Each module's own import cost in a running gpumix-top (issue 13: the dashboard's RSS).

Runs `gpumix-top ARGS` in a 160x48 pseudo-terminal through a wrapper that traces the Python heap
(tracemalloc) and wraps every module's loader: a module's cost is the traced bytes its import added
(its code objects, its body's classes, functions and tables) less its own imports' costs. --after
seconds in it writes the costs by module and by package (gpumix's by subpackage), with the traced
heap then: what is left over is what the running dashboard holds (caches, history, widgets).

    python benchmarks/import_self_costs.py --after 10 --out costs.json -- --sim benchmarks/rig_1gpu.toml --interval 1
"""

from __future__ import annotations

import argparse
import importlib.abc
import json
import os
import select
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

STACK: list[list[Any]] = []  # [module name, traced bytes at its start, its imports' bytes]
OWN_BYTES: dict[str, int] = {}


class MeasuredLoader:
    """A module's loader, its exec_module (which also reads and unmarshals its code) measured."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> Any:  # resources, is_package, get_code ...: the loader's own
        return getattr(self._loader, name)

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        STACK.append([module.__name__, tracemalloc.get_traced_memory()[0], 0])
        try:
            self._loader.exec_module(module)
        finally:
            name, start, children = STACK.pop()
            total = tracemalloc.get_traced_memory()[0] - start
            OWN_BYTES[name] = total - children
            if STACK:
                STACK[-1][2] += total


class MeasuringFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the finders after it and wraps the loader of what they find."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = MeasuredLoader(spec.loader)
                return spec
        return None


def package_of(name: str) -> str:
    return ".".join(name.split(".")[:2]) if name.startswith("gpumix.") else name.split(".")[0]


def dump(out: Path) -> None:
    by_package: dict[str, int] = {}
    for name, size in OWN_BYTES.items():
        by_package[package_of(name)] = by_package.get(package_of(name), 0) + size
    result = {"traced_now_kb": tracemalloc.get_traced_memory()[0] // 1024, "imports_kb": sum(OWN_BYTES.values()) // 1024,
              "python": sys.version.split()[0], "optimize": sys.flags.optimize,
              "by_package_kb": {k: v // 1024 for k, v in sorted(by_package.items(), key=lambda item: -item[1])},
              "by_module_kb": {k: v // 1024 for k, v in sorted(OWN_BYTES.items(), key=lambda item: -item[1])}}
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(result, indent=1) + "\n")
    partial.rename(out)


def child(after_s: float, out: Path, argv: list[str]) -> int:
    tracemalloc.start()
    sys.meta_path.insert(0, MeasuringFinder())
    timer = threading.Timer(after_s, dump, (out,))
    timer.daemon = True
    timer.start()
    from gpumix.tui.main import main

    return main(argv)


def parent(args: argparse.Namespace, argv: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_tui import spawn_in_pty, stop  # a sibling script, not a package

    command = [sys.executable, *(["-OO"] if args.optimize else []), str(Path(__file__).resolve()), "--child",
               "--after", str(args.after), "--out", str(args.out), "--", *argv]
    args.out.unlink(missing_ok=True)
    pid, master = spawn_in_pty(command, args.cols, args.rows)
    deadline = time.monotonic() + args.after + 120
    while time.monotonic() < deadline and not args.out.exists():  # drain the terminal meanwhile
        if select.select([master], [], [], 0.05)[0]:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:
                break
    print(stop(pid, master, b"q", bytearray()))
    if args.out.exists():
        result = json.loads(args.out.read_text())
        print(f"traced {result['traced_now_kb']} kB, imports {result['imports_kb']} kB;",
              ", ".join(f"{k} {v}" for k, v in list(result["by_package_kb"].items())[:20]))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--after", type=float, default=10.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--optimize", action="store_true", help="run the wrapper at -OO (as the re-executed monitor)")
    parser.add_argument("--cols", type=int, default=160)
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if args.child:
        return child(args.after, args.out, argv)
    return parent(args, argv)


if __name__ == "__main__":
    sys.exit(main())
