"""What each part of the dashboard costs to import, in one fresh interpreter (issue 13: the dashboard's RSS).

Imports the parts in the dashboard's order (asyncio without ssl first, as gpumix-top does) and, for each,
the Python heap it added (tracemalloc) and the resident memory it added (VmRSS), with its module count.
Then what pynvml costs and how much of it gpumix never calls: the names our code reads (pynvml.X in
gpumix/, tui/, agent/) and what they reach, the rest dropped from the module and collected.

    python benchmarks/import_costs.py --out import_costs.json
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import sys
import tracemalloc
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PARTS = (
    ("textual (app, widgets, containers, screen)", ("textual.app", "textual.widgets", "textual.containers", "textual.screen")),
    ("pynvml", ("pynvml",)),
    ("psutil", ("psutil",)),
    ("TUI dialogs and views (probe, plan, power, ranks, advice, controls)",
     ("gpumix.tui.probe_screen", "gpumix.tui.plan_screen", "gpumix.tui.power_screens", "gpumix.tui.ranks_screen",
      "gpumix.tui.advice_screens", "gpumix.tui.controls")),
    ("TUI app (the rest)", ("gpumix.tui.app",)),
    ("gpumix-top entry", ("gpumix.tui.main",)),
    ("in-process hub (node, hardware, hub, advisor)", ("gpumix.cli.node", "gpumix.cli.hardware")),
    ("simulator", ("gpumix.sim.machine", "gpumix.sim.rig", "gpumix.sim.nvml")),
)


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def import_part(modules: tuple[str, ...]) -> dict[str, Any]:
    gc.collect()
    before_rss, before_modules = rss_kb(), set(sys.modules)
    tracemalloc.start()
    for name in modules:
        __import__(name)
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    new = set(sys.modules) - before_modules
    return {"traced_kb": traced // 1024, "rss_kb": rss_kb() - before_rss, "modules": len(new),
            "gpumix_modules": len([name for name in new if name.startswith("gpumix")])}


def pynvml_unused() -> dict[str, Any]:
    """Drop from a fresh pynvml what our code never reaches; the traced heap before and after."""
    used = set()
    for folder in ("gpumix", "tui", "agent"):
        for path in (REPO / folder).rglob("*.py"):
            used.update(re.findall(r"pynvml\.([A-Za-z_]\w*)", path.read_text()))
    del sys.modules["pynvml"]
    gc.collect()
    tracemalloc.start()
    import pynvml

    gc.collect()
    full, _ = tracemalloc.get_traced_memory()
    namespace = vars(pynvml)
    keep = {name for name in namespace if name.startswith("__")} | used
    todo = list(used)
    while todo:  # what the used names reach by global name, transitively
        code = getattr(namespace.get(todo.pop()), "__code__", None)
        stack = [code] if code else []
        while stack:
            current = stack.pop()
            for name in current.co_names:
                if name in namespace and name not in keep:
                    keep.add(name)
                    todo.append(name)
            stack.extend(const for const in current.co_consts if isinstance(const, types.CodeType))
    dropped = [name for name, value in list(namespace.items())
               if name not in keep and isinstance(value, (types.FunctionType, type))]
    for name in dropped:
        del namespace[name]
    gc.collect()
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"names_used_by_gpumix": len(used), "traced_kb": full // 1024, "dropped_functions_and_classes": len(dropped),
            "traced_kb_after_dropping": after // 1024}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from gpumix.cli.asyncio_without_ssl import import_asyncio_without_ssl

    result: dict[str, Any] = {"python": sys.version.split()[0], "asyncio (without ssl)": None, "parts": {}}
    gc.collect()
    before = rss_kb()
    tracemalloc.start()
    import_asyncio_without_ssl()
    result["asyncio (without ssl)"] = {"traced_kb": tracemalloc.get_traced_memory()[0] // 1024, "rss_kb": rss_kb() - before}
    tracemalloc.stop()
    for label, modules in PARTS:
        result["parts"][label] = import_part(modules)
        print(f"{label}: {result['parts'][label]}")
    result["pynvml_unused"] = pynvml_unused()
    print(f"asyncio: {result['asyncio (without ssl)']}\npynvml: {result['pynvml_unused']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
