"""Dependencies point one way (tui -> core <- agent), and the agent stays light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


# Each part of the code and the parts it may import (docs/architecture.md has the picture). A part
# sits above every part it imports: no import runs back up, and the graph has no cycle.
MAY_IMPORT: dict[str, set[str]] = {
    "wire": set(),  # frames, auth, paths, plan files, job names: standard library only
    "model": set(),  # the step model's curves and priors: standard library only
    "hw": set(),  # NVML reads and the hardware's types
    "plan": {"model", "wire"},  # wire: the snapshot contract it reads (standard library only)
    "power": {"hw", "model", "wire"},
    "advice": {"power", "probe"},  # probe: kept `gpumix probe` results, read from the store
    "hub": {"advice", "hw", "power", "wire"},
    "record": {"wire"},
    "run": {"hub", "plan", "wire"},
    "agent": {"wire"},
    "probe": {"hw"},  # gpumix probe: measured link truth (torch imported lazily)
    # the simulated world and its demo job: never imported by the core
    "sim": {"hw", "wire"},  # wire: the bounded file reader
    "demo": {"agent", "hub", "run", "sim", "wire"},
    # the wiring: commands that put the parts together
    "cli": {"advice", "demo", "gpumix", "hub", "hw", "model", "plan", "power", "probe", "record", "run", "sim",
            "wire"},
    "tui": {"cli", "gpumix", "hub", "hw", "model", "plan", "power", "record", "run", "wire", "advice"},
}
CORE = {"wire", "model", "hw", "plan", "power", "advice", "hub", "record", "run", "probe"}


def imported_modules(folder: Path) -> dict[Path, set[str]]:
    found = {}
    for path in folder.rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[path] = names
    return found


def part_of(path: Path) -> str:
    relative = path.relative_to(ROOT).parts
    if relative[0] in ("tui", "agent"):
        return relative[0]
    return relative[1] if len(relative) > 2 else "gpumix"


def imported_part(module: str) -> str | None:
    names = module.split(".")
    if names[0] != "gpumix":
        return None
    return "gpumix" if len(names) == 1 else names[1]


def import_edges() -> dict[str, dict[str, list[str]]]:
    """part -> imported part -> the files that import it."""
    edges: dict[str, dict[str, list[str]]] = {}
    for folder in (ROOT / "gpumix", ROOT / "tui", ROOT / "agent"):
        for path, names in imported_modules(folder).items():
            source = part_of(path)
            for name in names:
                target = imported_part(name)
                if target is not None and target != source:
                    edges.setdefault(source, {}).setdefault(target, []).append(str(path.relative_to(ROOT)))
    return edges


def test_every_part_imports_only_the_parts_below_it() -> None:
    assert set(part_of(p) for p in (ROOT / "gpumix").rglob("*.py")) - {"gpumix", "rigs"} <= set(MAY_IMPORT), (
        "a new part: add it to MAY_IMPORT and to docs/architecture.md")
    for source, targets in import_edges().items():
        for target, files in targets.items():
            assert target in MAY_IMPORT.get(source, set()), f"{source} may not import {target}: {files}"


def test_the_allowed_imports_have_no_cycle() -> None:
    done: set[str] = set()

    def visit(part: str, path: tuple[str, ...]) -> None:
        assert part not in path, f"import cycle: {' -> '.join((*path, part))}"
        if part in done:
            return
        for target in MAY_IMPORT.get(part, set()) - {"gpumix"}:
            visit(target, (*path, part))
        done.add(part)

    for part in MAY_IMPORT:
        visit(part, ())


def test_the_core_never_imports_the_world_the_wiring_or_the_tui() -> None:
    for part in CORE | {"agent"}:
        assert not MAY_IMPORT[part] & {"sim", "demo", "cli", "tui"}, part


def test_core_and_agent_never_import_the_tui() -> None:
    for folder in (ROOT / "gpumix", ROOT / "agent"):
        for path, names in imported_modules(folder).items():
            bad = {name for name in names if name == "gpumix.tui" or name.startswith("gpumix.tui.")}
            assert not bad, f"{path} imports {bad}: dependencies point tui -> core <- agent"


def test_agent_import_is_light() -> None:
    code = "import sys, gpumix.agent; print(sorted({'textual', 'plotext', 'pynvml', 'rich'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_no_top_level_tui_or_agent_package() -> None:
    code = "import importlib.util as u; print(u.find_spec('tui'), u.find_spec('agent'))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert result.stdout.strip() == "None None"
